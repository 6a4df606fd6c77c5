#!/usr/bin/env bash
# End-to-end pipeline throughput and peak RSS, printed as a markdown table.
#
#   benches/pipeline.sh            # all pipelines in benches/pipelines/
#
# Each pipeline runs with the release `sluice` binary, once pinned to one core
# (taskset -c 0: source and operator threads share it) and once on all cores.
# Peak RSS is GNU time's "Maximum resident set size".
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p sluice-cli
target="${CARGO_TARGET_DIR:-target}"
sluice="$target/release/sluice"
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)"; exit 1; }

# Build the plugins once so that build time is not measured.
for p in identity currency-convert; do "$sluice" plugin build "plugins/$p" >/dev/null; done

echo "| pipeline | cores | records | seconds | records/s | peak RSS (MiB) |"
echo "| --- | --- | --- | --- | --- | --- |"
for file in benches/pipelines/*.toml; do
  for cores in 1 2; do
    if [ "$cores" = 1 ]; then pin=(taskset -c 0); else pin=(); fi
    log=$(mktemp)
    "${pin[@]}" /usr/bin/time -v "$sluice" run --quiet "$file" 2>"$log" >/dev/null
    line=$(grep -E '^completed in' "$log")
    seconds=$(echo "$line" | sed -E 's/completed in ([0-9.]+) s.*/\1/')
    records=$(echo "$line" | sed -E 's/.*: ([0-9]+) records in.*/\1/')
    rate=$(echo "$line" | sed -E 's/.*records in \(([0-9]+)\/s\).*/\1/')
    rss_kb=$(grep 'Maximum resident set size' "$log" | awk '{print $NF}')
    printf "| %s | %s | %s | %s | %s | %s |\n" "$(basename "$file" .toml)" "$cores" "$records" "$seconds" "$rate" "$((rss_kb / 1024))"
    rm -f "$log"
  done
done
