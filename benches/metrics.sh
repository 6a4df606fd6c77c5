#!/usr/bin/env bash
# What metrics collection costs the record path, printed as a table
# (docs/benchmarks.md).
#
# The identity pipeline (RECORDS generated 100-byte records, default
# 60,000,000, about 15 s -> identity plugin -> blackhole: a copy of
# benches/pipelines/identity-blackhole.toml) runs on
# one core (taskset -c 0) three ways, alternating, ROUNDS times each:
#   - plain `sluice run` (counters only: they are always kept),
#   - with `--http` (the endpoint and the status sampler running),
#   - with `--http` and `/metrics` scraped every second, as Prometheus would.
# Reported: median records/s and median CPU µs per record (user + sys of
# the process / records), and the cost relative to the plain run.
#
#   benches/metrics.sh            # ROUNDS=5
#   ROUNDS=3 RECORDS=10000000 benches/metrics.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice/target}"
cargo build --release -q -p sluice-cli
sluice="$CARGO_TARGET_DIR/release/sluice"
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)"; exit 1; }
rounds="${ROUNDS:-5}"
records="${RECORDS:-60000000}"
"$sluice" plugin build plugins/identity >/dev/null
work=$(mktemp -d)
# Next to the original so that its relative plugin path holds.
pipeline=benches/pipelines/.metrics-identity-blackhole.toml
sed "s/^count = .*/count = $records/" benches/pipelines/identity-blackhole.toml >"$pipeline"
trap 'rm -rf "$work" "$pipeline"' EXIT

run_once() { # mode -> "records/s cpu_µs_per_record scrapes"
  local mode="$1" port=$((20000 + RANDOM % 20000)) http=() scrapes=0
  if [ "$mode" != plain ]; then http=(--http "127.0.0.1:$port"); fi
  taskset -c 0 /usr/bin/time -f "cpu %U %S" "$sluice" run --quiet "${http[@]}" "$pipeline" \
    >/dev/null 2>"$work/log" &
  local pid=$!
  if [ "$mode" = scraped ]; then
    # Scrape from the second core so that curl's own CPU is not counted.
    until curl -sf "http://127.0.0.1:$port/metrics" -o /dev/null; do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    while kill -0 "$pid" 2>/dev/null; do
      if taskset -c 1 curl -sf "http://127.0.0.1:$port/metrics" -o "$work/metrics.txt"; then
        scrapes=$((scrapes + 1))
      fi
      sleep 1
    done
  fi
  wait "$pid"
  local line records seconds cpu
  line=$(grep -E '^completed in' "$work/log")
  seconds=$(echo "$line" | sed -E 's/completed in ([0-9.]+) s.*/\1/')
  records=$(echo "$line" | sed -E 's/.*: ([0-9]+) records in.*/\1/')
  cpu=$(awk '/^cpu / { print $2 + $3 }' "$work/log")
  awk -v r="$records" -v s="$seconds" -v c="$cpu" -v n="$scrapes" \
    'BEGIN { printf "%.0f %.4f %d\n", r / s, c * 1e6 / r, n }'
}

declare -A rates cpus scraped
for round in $(seq 1 "$rounds"); do
  for mode in plain http scraped; do
    read -r rate cpu n < <(run_once "$mode")
    rates[$mode]+="$rate "
    cpus[$mode]+="$cpu "
    scraped[$mode]=$(( ${scraped[$mode]:-0} + n ))
    echo "round $round $mode: $rate records/s, $cpu µs/record, $n scrapes" >&2
  done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
base_cpu=$(echo "${cpus[plain]}" | median)
echo
echo "| identity, $records records, 1 core ($rounds rounds, medians) | records/s | CPU µs/record | CPU vs plain | scrapes |"
echo "| --- | ---: | ---: | ---: | ---: |"
for mode in plain http scraped; do
  rate=$(echo "${rates[$mode]}" | median)
  cpu=$(echo "${cpus[$mode]}" | median)
  case "$mode" in
    plain) label="sluice run" ;;
    http) label="sluice run --http (not scraped)" ;;
    scraped) label="sluice run --http, /metrics every 1 s" ;;
  esac
  awk -v l="$label" -v r="$rate" -v c="$cpu" -v bc="$base_cpu" -v n="${scraped[$mode]}" \
    'BEGIN { printf "| %s | %.0f | %.3f | %+.1f %% | %d |\n", l, r, c, (c / bc - 1) * 100, n }'
done
if [ -s "$work/metrics.txt" ]; then
  echo
  echo "last scrape: $(wc -c <"$work/metrics.txt") bytes, $(grep -vc '^#' "$work/metrics.txt") samples"
fi
scraped_cpu=$(echo "${cpus[scraped]}" | median)
http_cpu=$(echo "${cpus[http]}" | median)
awk -v s="$scraped_cpu" -v h="$http_cpu" \
  'BEGIN { printf "scraping /metrics every second: %+.1f %% CPU per record against the same run unscraped\n", (s / h - 1) * 100 }'
