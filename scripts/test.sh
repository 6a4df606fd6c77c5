#!/usr/bin/env bash
# The test command: installs what is missing, starts (in the background) a real Kafka broker,
# an S3-compatible server and PostgreSQL, then checks formatting, lints and runs every test
# (unit, integration against real plugin components, the broker and S3,
# CLI processes killed mid-stream). Ends with how long each step took.
set -euo pipefail
cd "$(dirname "$0")/.."

step_lines=()
step() { # name, command...
  local name="$1" start=$SECONDS
  shift
  echo "== $name"
  "$@"
  step_lines+=("$(printf '%-40s %5d s' "$name" $((SECONDS - start)))")
}
print_steps() {
  echo "== steps (total ${SECONDS} s)"
  printf '%s\n' "${step_lines[@]}"
}

step "setup-toolchain.sh --system" scripts/setup-toolchain.sh --system

# Plugins the tests build, and the code they compile to, are cached beside
# the test binaries (`sluice_tests::shared_cache_dir`), also for the `sluice`
# processes the tests start: one cache, not a second in the user's
# ~/.cache (the same Python plugin compiled twice cost ~12 s of CPU).
target_dir="${CARGO_TARGET_DIR:-target}"
[[ "$target_dir" == /* ]] || target_dir="$PWD/$target_dir"
export SLUICE_CACHE_DIR="${SLUICE_CACHE_DIR:-$target_dir/sluice-test-cache/components}"

# What the tests need but the build does not — the plugin toolchains' Python
# and npm packages, the services (downloads the first time, JVM start-ups) —
# is set up in the background while the code is checked and built (mostly
# waiting on the network, it cost ~60 s in the foreground); the step
# "packages and services" waits for it and shows its output.
background_log=$(mktemp)
(scripts/setup-toolchain.sh --packages && scripts/dev-services.sh up) >"$background_log" 2>&1 &
background_pid=$!
stop_services() {
  kill "$background_pid" 2>/dev/null && wait "$background_pid" 2>/dev/null
  scripts/dev-services.sh down
  rm -f "$background_log"
}
trap 'print_steps; stop_services' EXIT
background_ready() {
  local status=0
  wait "$background_pid" || status=$?
  cat "$background_log"
  return "$status"
}

step "cargo fmt" bash -c 'cargo fmt --all -- --check && cd plugins && cargo fmt --all -- --check'

step "cargo clippy" cargo clippy --workspace --all-targets --quiet -- -D warnings

# Doc links that point nowhere or at private items fail, as lints do.
step "cargo doc" env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

step "Kubernetes manifests" scripts/check-manifests.sh

# The hostile-plugin tests run once, below, under load.
# SLUICE_CARGO_TIMINGS=1: cargo's per-crate report of this build in target/cargo-timings/.
step "cargo test (build)" cargo test --workspace --no-run --quiet ${SLUICE_CARGO_TIMINGS:+--timings}

step "packages and services (background)" background_ready

# Two tests per core at a time: most of a test's time is spent waiting on
# the processes, broker and servers it drives (two at a time on 2 cores left
# a third of the CPU idle; four ran the CLI tests in 266 s instead of 418).
test_threads="${SLUICE_TEST_THREADS:-$((2 * $(nproc)))}"
step "cargo test" cargo test --workspace -- --skip hostile_plugins:: --test-threads="$test_threads"

# Fault isolation must hold on a loaded machine: the hostile-plugin tests,
# with a busy process per core running beside each test. `--workspace`
# reuses the test binary built above (`-p` would build another).
step "hostile-plugin tests under CPU load" \
  env SLUICE_TEST_CPU_LOAD=1 cargo test --workspace --test all -- hostile_plugins::

# A short fuzz run of the packed-format decoders where nightly and cargo-fuzz
# are installed (longer, installing cargo-fuzz if missing: scripts/fuzz.sh 600).
step "fuzz" scripts/fuzz.sh --if-installed 15
