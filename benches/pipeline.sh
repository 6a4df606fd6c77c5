#!/usr/bin/env bash
# End-to-end pipeline throughput and peak RSS, printed as a markdown table.
#
#   benches/pipeline.sh                    # all pipelines in benches/pipelines/
#   benches/pipeline.sh benches/pipelines/q5-full.toml   # some of them
#
# Each pipeline runs with the release `sluice` binary, once pinned to one core
# (taskset -c 0: source and operator threads share it) and once on all cores.
# Peak RSS is GNU time's "Maximum resident set size"; CPU µs per record is
# (user + sys of the process) / records, which holds on a shared machine
# where records/s moves with the load.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p sluice-cli
target="${CARGO_TARGET_DIR:-target}"
sluice="$target/release/sluice"
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)"; exit 1; }

# Build the plugins once so that build time is not measured.
for p in identity currency-convert filter-bids highest-bid hot-items; do
  "$sluice" plugin build "plugins/$p" >/dev/null
done

# Pipelines with a keyed operator (window or join) also run with 2 workers:
# a copy of the file with `workers = 2`, next to it so relative paths hold.
echo "| pipeline | workers | cores | records | seconds | records/s | CPU µs/record | peak RSS (MiB) | peak state, live (KiB) | peak state, on disk (KiB) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
if [ $# -gt 0 ]; then files=("$@"); else files=(benches/pipelines/*.toml); fi
for file in "${files[@]}"; do
  worker_counts=1
  if grep -qE '^(window|join) =' "$file"; then worker_counts="1 2"; fi
  for workers in $worker_counts; do
    run_file="$file"
    if [ "$workers" != 1 ]; then
      run_file="$(dirname "$file")/.workers-$workers-$(basename "$file")"
      sed "s/^\[pipeline\]$/[pipeline]\nworkers = $workers/" "$file" >"$run_file"
    fi
    for cores in 1 2; do
      # One core cannot show what a second worker gains.
      if [ "$workers" != 1 ] && [ "$cores" = 1 ]; then continue; fi
      if [ "$cores" = 1 ]; then pin=(taskset -c 0); else pin=(); fi
      log=$(mktemp)
      "${pin[@]}" /usr/bin/time -v "$sluice" run --quiet "$run_file" 2>"$log" >/dev/null
      line=$(grep -E '^completed in' "$log")
      seconds=$(echo "$line" | sed -E 's/completed in ([0-9.]+) s.*/\1/')
      records=$(echo "$line" | sed -E 's/.*: ([0-9]+) records in.*/\1/')
      rate=$(echo "$line" | sed -E 's/.*records in \(([0-9]+)\/s\).*/\1/')
      rss_kb=$(grep 'Maximum resident set size' "$log" | awk '{print $NF}')
      cpu_us=$(awk -v records="$records" '/User time \(seconds\)/ { u = $NF } /System time \(seconds\)/ { s = $NF }
        END { printf "%.2f", (u + s) / records * 1e6 }' "$log")
      # Operators sharing a column family report the same size: the largest
      # per operator name, summed over the names. Live = RocksDB live data
      # plus memtables; on disk = SST files.
      read -r state_kib disk_kib < <(grep -E '^ +(operator|state) ' "$log" | awk '
        /^ +operator / { name = $2; sub(/[#:].*/, "", name) }
        /^ +state / {
          if (match($0, /peak [0-9]+ bytes/)) { v = substr($0, RSTART + 5, RLENGTH - 11) + 0; if (v > live[name]) live[name] = v }
          if (match($0, /\(peak [0-9]+\)/)) { d = substr($0, RSTART + 6, RLENGTH - 7) + 0; if (d > disk[name]) disk[name] = d }
        }
        END { l = 0; t = 0; for (n in live) l += live[n]; for (n in disk) t += disk[n]; printf "%d %d\n", l / 1024, t / 1024 }')
      printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n" "$(basename "$file" .toml)" "$workers" "$cores" "$records" "$seconds" "$rate" "$cpu_us" "$((rss_kb / 1024))" "$state_kib" "$disk_kib"
      rm -f "$log"
    done
    if [ "$run_file" != "$file" ]; then rm -f "$run_file"; fi
  done
done
