#!/usr/bin/env bash
# The record path (issue 15): CPU per record from a file of JSON lines with
# event time, through each kind of operator, to a blackhole. Prints a
# markdown table.
#
#   benches/record-path.sh            # 2,000,000 records (Python, JavaScript: 1/10 of that)
#   RECORDS=500000 benches/record-path.sh
#   benches/record-path.sh window     # only the rows whose name contains "window"
#   REPEAT=5 benches/record-path.sh   # runs per row (default 3); the run
#                                     # with the median CPU time is shown
#
# Records are ~170 bytes: {"id", "key" (0..999), "text" (100 characters),
# "ts" (1 ms apart), "user"}. Every run is pinned to one core
# (taskset -c 0: source, operators and sink share it). CPU µs per record is
# (user + sys of the process) / records, which holds on a shared machine;
# records/s is wall clock and moves with the machine's load. The plugin's
# guest memory is the largest linear memory of the run (the run summary).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
cargo build --release -q -p sluice-cli
target="${CARGO_TARGET_DIR:-target}"
sluice="$target/release/sluice"
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)"; exit 1; }
records="${RECORDS:-2000000}"
python_records=$((records / 10))
only="${1:-}"

work="${RECORD_PATH_DIR:-${TMPDIR:-/tmp}/sluice-record-path}"
mkdir -p "$work"
input="$work/records-$records.jsonl"
if [ ! -s "$input" ]; then
  python3 - "$records" "$input" <<'EOF'
import random, string, sys
count, path = int(sys.argv[1]), sys.argv[2]
rng = random.Random(15)
texts = ["".join(rng.choice(string.ascii_lowercase + " ") for _ in range(100)) for _ in range(64)]
with open(path, "w") as out:
    for i in range(count):
        out.write('{"id":%d,"key":%d,"text":"%s","ts":%d,"user":"user-%04d"}\n'
                  % (1000000 + i, rng.randrange(1000), texts[i % 64], 1767225600000 + i, i % 7919))
EOF
fi
head -n "$python_records" "$input" >"$work/records-python.jsonl"

# Built once here; the pipelines name the components, so that no run
# measures a build.
# `plugin build` prints the component's path first (it lies under
# CARGO_TARGET_DIR when that is set).
built() { realpath "$("$sluice" plugin build "$1" | awk '{print $1; exit}')"; }
# needed ROW...: whether a row to run (one whose name contains the filter)
# is among these, so that a filtered run builds only its components.
needed() {
  for row in "$@"; do
    case "$row" in *"$only"*) return 0 ;; esac
  done
  return 1
}
none=/nonexistent.wasm
rust_filter=$none rust_count_sum=$none python_filter=$none python_count_sum=$none
js_count_sum=$none c_filter=$none js_filter=$none
if needed rust-filter-rewrite rust-filter-rewrite-document rust-filter-rewrite-serde; then rust_filter=$(built plugins/filter-rewrite); fi
if needed window-count-sum-plugin window-count-sum-plugin-rocksdb; then rust_count_sum=$(built plugins/count-sum); fi
if needed python-filter-rewrite python-filter-rewrite-json python-filter-rewrite-batch; then python_filter=$(built plugins/python/filter-rewrite); fi
# The Python and JavaScript aggregates are the ones `sluice plugin new
# --world aggregate` scaffolds (a count and a sum of `field`), made afresh
# for each run.
scaffolded_aggregate() {
  rm -rf "$work/$1-count-sum"
  "$sluice" plugin new count-sum --dir "$work/$1-count-sum" --world aggregate --lang "$1" >/dev/null
  built "$work/$1-count-sum/count-sum"
}
if needed window-count-sum-python; then python_count_sum=$(scaffolded_aggregate python); fi
if needed window-count-sum-js; then js_count_sum=$(scaffolded_aggregate js); fi
if needed c-filter-rewrite c-filter-rewrite-typed; then c_filter=$(built plugins/c/filter-rewrite); fi
if needed js-filter-rewrite js-filter-rewrite-json js-filter-rewrite-batch js-filter-rewrite-typed; then js_filter=$(built plugins/js/filter-rewrite); fi
# Compiled to native code (and cached) here too, so that no run measures
# Cranelift.
for component in "$rust_filter" "$rust_count_sum" "$python_filter" "$python_count_sum" "$js_count_sum" "$c_filter" "$js_filter"; do
  if [ "$component" != "$none" ]; then
    "$sluice" plugin inspect "$component" >/dev/null
  fi
done

# pipeline NAME INPUT OPERATOR-TOML: writes $work/NAME.toml.
pipeline() {
  cat >"$work/$1.toml" <<EOF
[pipeline]
name = "record-path-$1"
batch_size = 1024
$4

[source.file]
path = "$2"
timestamp_field = "ts"

$3

[sink]
blackhole = {}
EOF
}

window_builtin='[[operators]]
name = "window"
window = { tumbling_ms = 60_000 }
key_field = "key"
aggregates = [{ name = "count", function = "count" }, { name = "sum", function = "sum", field = "id" }]'
window_plugin="[[operators]]
name = \"window\"
window = { tumbling_ms = 60_000 }
key_field = \"key\"
plugin = \"$rust_count_sum\"
config = { field = \"id\" }"

pipeline "file-blackhole" "$input" "" ""
# filter_rewrite COMPONENT [EXTRA-TOML]: the filter + rewrite operator.
filter_rewrite() {
  printf '[[operators]]\nname = "filter-rewrite"\nplugin = "%s"\n%s' "$1" "${2:-}"
}

pipeline "rust-filter-rewrite" "$input" "$(filter_rewrite "$rust_filter")" ""
pipeline "rust-filter-rewrite-document" "$input" "$(filter_rewrite "$rust_filter" 'config = { mode = "document" }')" ""
pipeline "rust-filter-rewrite-serde" "$input" "$(filter_rewrite "$rust_filter" 'config = { mode = "serde" }')" ""
# The same filter and rewrite as a SQL operator (issue 40): no plugin.
pipeline "sql-filter-rewrite" "$input" '[[operators]]
name = "filter-rewrite"
sql = "SELECT id, key, UPPER(text) AS text, ts, user FROM input WHERE key % 10 <> 0"' ""
pipeline "c-filter-rewrite" "$input" "$(filter_rewrite "$c_filter")" ""
pipeline "c-filter-rewrite-typed" "$input" "$(filter_rewrite "$c_filter" 'call_mode = "typed"')" ""
pipeline "window-count-sum-builtin" "$input" "$window_builtin" ""
# The same window as SQL (issue 40), and the issue's COUNT + SUM(CHAR_LENGTH)
# beside the built-in `length(text)`.
pipeline "window-count-sum-sql" "$input" '[[operators]]
name = "window"
sql = "SELECT key, window_start, window_end, COUNT(*) AS count, SUM(id) AS sum FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(ts), INTERVAL '"'"'60'"'"' SECOND)) GROUP BY key, window_start, window_end"' ""
pipeline "window-count-length-builtin" "$input" '[[operators]]
name = "window"
window = { tumbling_ms = 60_000 }
key_field = "key"
aggregates = [{ name = "count", function = "count" }, { name = "total_len", function = "sum", field = "length(text)" }]' ""
pipeline "window-count-length-sql" "$input" '[[operators]]
name = "window"
sql = "SELECT key, window_start, window_end, COUNT(*) AS cnt, SUM(CHAR_LENGTH(text)) AS total_len FROM TABLE(TUMBLE(TABLE input, DESCRIPTOR(ts), INTERVAL '"'"'60'"'"' SECOND)) GROUP BY key, window_start, window_end"' ""
pipeline "window-count-sum-plugin" "$input" "$window_plugin" ""
pipeline "window-count-sum-builtin-rocksdb" "$input" "$window_builtin" "state_cache_mb = 0"
pipeline "window-count-sum-plugin-rocksdb" "$input" "$window_plugin" "state_cache_mb = 0"
pipeline "window-count-sum-python" "$work/records-python.jsonl" "${window_plugin/$rust_count_sum/$python_count_sum}" ""
pipeline "window-count-sum-js" "$work/records-python.jsonl" "${window_plugin/$rust_count_sum/$js_count_sum}" ""
pipeline "python-filter-rewrite" "$work/records-python.jsonl" "$(filter_rewrite "$python_filter" 'memory_limit_mb = 64')" ""
pipeline "python-filter-rewrite-json" "$work/records-python.jsonl" "$(filter_rewrite "$python_filter" 'memory_limit_mb = 64
config = { mode = "json" }')" ""
pipeline "python-filter-rewrite-batch" "$work/records-python.jsonl" "$(filter_rewrite "$python_filter" 'memory_limit_mb = 64
config = { mode = "batch" }')" ""
# JavaScript runs interpreted: a batch of 1,024 records takes ~50-300 ms,
# past the default CPU deadline (100 ms), which would make every run a
# record-by-record retry; the deadline is raised for what is measured.
pipeline "js-filter-rewrite" "$work/records-python.jsonl" "$(filter_rewrite "$js_filter" 'deadline_ms = 5000')" ""
pipeline "js-filter-rewrite-json" "$work/records-python.jsonl" "$(filter_rewrite "$js_filter" 'deadline_ms = 5000
config = { mode = "json" }')" ""
pipeline "js-filter-rewrite-batch" "$work/records-python.jsonl" "$(filter_rewrite "$js_filter" 'deadline_ms = 5000
config = { mode = "batch" }')" ""
pipeline "js-filter-rewrite-typed" "$work/records-python.jsonl" "$(filter_rewrite "$js_filter" 'deadline_ms = 5000
call_mode = "typed"')" ""

echo "| path | records | user s | sys s | CPU µs/record | records/s | peak RSS (MiB) | plugin memory at end (MiB) | restarts |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for name in file-blackhole rust-filter-rewrite rust-filter-rewrite-document rust-filter-rewrite-serde \
  sql-filter-rewrite c-filter-rewrite c-filter-rewrite-typed window-count-sum-builtin window-count-sum-sql \
  window-count-length-builtin window-count-length-sql window-count-sum-plugin \
  window-count-sum-builtin-rocksdb window-count-sum-plugin-rocksdb window-count-sum-python window-count-sum-js python-filter-rewrite python-filter-rewrite-json \
  python-filter-rewrite-batch js-filter-rewrite js-filter-rewrite-json js-filter-rewrite-batch \
  js-filter-rewrite-typed; do
  case "$name" in *"$only"*) ;; *) continue ;; esac
  # Runs moved by up to a third with the shared machine's load: each row
  # is the run with the median CPU time of $REPEAT.
  for run in $(seq "${REPEAT:-3}"); do
    taskset -c 0 /usr/bin/time -f 'time %U %S %M' "$sluice" run --quiet "$work/$name.toml" \
      >"$work/$name.$run.log.out" 2>"$work/$name.$run.log"
    echo "$(grep '^time ' "$work/$name.$run.log" | tail -1 | awk '{ print $2 + $3 }') $run"
  done | sort -n | awk '{ runs[NR] = $2 } END { print runs[int((NR + 1) / 2)] }' >"$work/$name.median"
  median_run=$(cat "$work/$name.median")
  log="$work/$name.log"
  cp "$work/$name.$median_run.log" "$log"
  read -r user sys rss_kb < <(grep '^time ' "$log" | tail -1 | cut -d' ' -f2-)
  line=$(grep -E '^completed in' "$log")
  seconds=$(echo "$line" | sed -E 's/completed in ([0-9.]+) s.*/\1/')
  count=$(echo "$line" | sed -E 's/.*: ([0-9]+) records in.*/\1/')
  memory=$(grep -oE 'plugin memory [0-9.]+ MiB' "$log" | awk '{ if ($3 > m) m = $3 } END { print m + 0 }' || true)
  restarts=$(grep -oE 'restarts [0-9]+' "$log" | awk '{ s += $2 } END { print s + 0 }' || true)
  python3 - "$name" "$count" "$user" "$sys" "$seconds" "$rss_kb" "$memory" "$restarts" <<'EOF'
import sys
name, count, user, sys_s, seconds, rss_kb, memory, restarts = sys.argv[1:]
count, user, sys_s, seconds = int(count), float(user), float(sys_s), float(seconds)
print(f"| {name} | {count:,} | {user:.2f} | {sys_s:.2f} | {(user + sys_s) / count * 1e6:.2f} "
      f"| {count / seconds / 1e6:.2f} M | {int(rss_kb) // 1024} | {memory if memory != '0' else '-'} | {restarts} |")
EOF
done
