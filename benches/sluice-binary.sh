# Sourced by the benchmark scripts (from the repository root): sets
# `sluice` to $SLUICE_BIN, a binary to compare (e.g. of an earlier commit),
# or else to the optimised build, built now.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice/target}"
if [ -n "${SLUICE_BIN:-}" ]; then
  sluice="$SLUICE_BIN"
else
  cargo build --release -p sluice-cli --quiet
  sluice="$CARGO_TARGET_DIR/release/sluice"
fi
