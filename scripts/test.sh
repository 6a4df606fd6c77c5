#!/usr/bin/env bash
# The test command: installs what is missing, starts a real Kafka broker,
# an S3-compatible server and PostgreSQL, then checks formatting, lints and runs every test
# (unit, integration against real plugin components, the broker and S3,
# CLI processes killed mid-stream).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup-toolchain.sh

echo "== cargo fmt"
cargo fmt --all -- --check
(cd plugins && cargo fmt --all -- --check)

echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings

# Doc links that point nowhere or at private items fail, as lints do.
echo "== cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

echo "== Kubernetes manifests"
scripts/check-manifests.sh

echo "== services"
scripts/dev-services.sh up
trap 'scripts/dev-services.sh down' EXIT

# The hostile-plugin tests run once, below, under load.
echo "== cargo test"
cargo test --workspace -- --skip hostile_plugins::

# Fault isolation must hold on a loaded machine: the hostile-plugin tests,
# with a busy process per core running beside each test. `--workspace`
# reuses the test binary built above (`-p` would build another).
echo "== hostile-plugin tests under CPU load"
SLUICE_TEST_CPU_LOAD=1 cargo test --workspace --test all -- hostile_plugins::

# A short fuzz run of the packed-format decoders (longer: scripts/fuzz.sh 600).
echo "== fuzz"
scripts/fuzz.sh 15
