#!/usr/bin/env bash
# Times the README's two commands as a newcomer meets them: a clean clone,
# empty caches (a fresh HOME, so a fresh cargo registry, pip and npm caches,
# Kafka jars and plugin builds; an empty target directory), each step timed.
# System packages and the Rust toolchain are the machine's (RUSTUP_HOME).
#
#   scripts/time-first-result.sh 1      README command 1 (the quickstart)
#   scripts/time-first-result.sh 2      README command 2 (every test)
#   scripts/time-first-result.sh release the optimised build (cargo build --release)
#
# Prints one line per step and the total; cargo's per-crate timings of the
# builds land in $WORK/clone/target/cargo-timings/. $WORK defaults to a new
# directory under /tmp and is kept (delete it afterwards: several GB).
# Nothing else should run on the machine meanwhile.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
which="${1:?usage: time-first-result.sh 1|2|release}"
work="${WORK:-$(mktemp -d /tmp/sluice-first-result.XXXXXX)}"
real_home="$HOME"

git clone --quiet "$repo" "$work/clone"
mkdir -p "$work/home"
export RUSTUP_HOME="${RUSTUP_HOME:-$real_home/.rustup}"
export HOME="$work/home"
export CARGO_HOME="$work/home/.cargo"
# The toolchain's commands, without what `cargo install` put beside them
# (cargo-fuzz): a fresh machine has only rustup's proxies.
mkdir -p "$CARGO_HOME/bin"
for tool in cargo rustc rustdoc rustup rustfmt cargo-fmt cargo-clippy clippy-driver; do
  ln -sf "$(command -v "$tool")" "$CARGO_HOME/bin/$tool"
done
export PATH="$CARGO_HOME/bin:${PATH//$real_home\/.cargo\/bin:/}"
export SLUICE_CARGO_TIMINGS=1
unset CARGO_TARGET_DIR CARGO_INCREMENTAL
export CARGO_TERM_COLOR=never
cd "$work/clone"

steps=()
step() { # name, command...
  local name="$1" start end
  shift
  echo "== $name"
  start=$(date +%s.%N)
  "$@"
  end=$(date +%s.%N)
  steps+=("$(printf '%-44s %7.1f s' "$name" "$(echo "$end - $start" | bc)")")
}

total_start=$(date +%s.%N)
case "$which" in
  1)
    step "setup-toolchain.sh --quickstart" scripts/setup-toolchain.sh --quickstart
    step "cargo build -p sluice-cli" cargo build -p sluice-cli --timings
    step "the quickstart (plugin builds + run)" \
      cargo run -p sluice-cli -- run examples/quickstart/pipeline.toml
    ;;
  release)
    # The optimised binary the lakehouse example and benchmarks run.
    step "cargo build --release -p sluice-cli" cargo build --release -p sluice-cli --timings
    ;;
  2)
    # scripts/test.sh prints its own per-step table.
    step "scripts/test.sh" scripts/test.sh
    ;;
  *) echo "usage: time-first-result.sh 1|2|release" >&2; exit 2 ;;
esac
total_end=$(date +%s.%N)

echo
echo "time-first-result.sh $which: from a clean clone with empty caches ($(nproc) cores, $(git rev-parse --short HEAD)):"
printf '%s\n' "${steps[@]}"
printf '%-44s %7.1f s\n' "total" "$(echo "$total_end - $total_start" | bc)"
echo "(kept: $work)"
