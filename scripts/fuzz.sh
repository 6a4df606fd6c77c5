#!/usr/bin/env bash
# Runs every fuzz target for a while (default 20 s each; `scripts/fuzz.sh
# 600` for a longer session). Needs a nightly toolchain and cargo-fuzz
# (installed here if missing). Crashes are written to fuzz/artifacts/.
#
# `scripts/fuzz.sh --if-installed 15` (the test command's short run) skips
# instead of installing: building cargo-fuzz from source took a fresh
# machine's test command ~2 minutes for a 30-second fuzz run.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
if_installed=false
if [ "${1:-}" = "--if-installed" ]; then
    if_installed=true
    shift
fi
seconds="${1:-20}"
if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz: no nightly toolchain; skipping (rustup toolchain install nightly)" >&2
    exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    if $if_installed; then
        echo "fuzz: cargo-fuzz not installed; skipping (scripts/fuzz.sh installs it and fuzzes)" >&2
        exit 0
    fi
    cargo install cargo-fuzz --version 0.13.2 --locked
fi
target_dir="${CARGO_FUZZ_TARGET_DIR:-$HOME/.cache/sluice/fuzz-target}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for target in $(cargo +nightly fuzz list); do
    echo "== fuzz $target (${seconds} s)"
    if ! cargo +nightly fuzz run --target-dir "$target_dir" "$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=1024 -print_final_stats=1 >"$log" 2>&1; then
        tail -n 60 "$log" >&2
        echo "fuzz: $target failed; the input is under fuzz/artifacts/$target" >&2
        exit 1
    fi
    grep -E '^(Done|stat::peak_rss_mb)' "$log" || true
done
