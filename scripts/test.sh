#!/usr/bin/env bash
# The test command: installs what is missing, then checks formatting, lints
# and runs every test (unit, integration against real plugin components, CLI).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup-toolchain.sh

echo "== cargo fmt"
cargo fmt --all -- --check
(cd plugins && cargo fmt --all -- --check)

echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings

echo "== cargo test"
cargo test --workspace
