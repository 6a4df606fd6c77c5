#!/usr/bin/env bash
# Peak RSS and CPU per record of keyed state (issue 44): a 1-hour tumbling
# window with built-in count and sum over KEYS distinct keys, and an
# interval join buffering RECORDS records, each at state_cache_mb 0, 16 and
# 128, one core (`taskset -c 0`), read from a JSON-lines file so that no
# broker shares the core. Prints a Markdown table.
#
#   benches/state-memory.sh                      # 1 M keys (2 M records)
#   KEYS=10000000 RECORDS=20000000 benches/state-memory.sh
#   CACHES="128" SKIP_JOIN=1 benches/state-memory.sh
#   SLUICE_BIN=/tmp/sluice-before benches/state-memory.sh   # another binary
#
# Peak RSS is the kernel's high-water mark of the process (`/usr/bin/time
# -f %M`); CPU is user + sys of the whole process over the records read.
set -euo pipefail
cd "$(dirname "$0")/.."

keys="${KEYS:-1000000}"
records="${RECORDS:-$((keys * 2))}"
caches="${CACHES:-0 16 128}"
. benches/sluice-binary.sh
work="${TMPDIR:-/tmp}/sluice-state-memory"
mkdir -p "$work"

# Records over `keys` keys, event times spread over one hour, keys in a
# shuffled order (so that a key's records are far apart, as in a stream).
input="$work/input-$keys-$records.jsonl"
if [ ! -s "$input" ]; then
  python3 - "$keys" "$records" "$input" <<'EOF'
import sys
keys, records, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
hour = 3_600_000
base = 1_767_225_600_000  # 2026-01-01T00:00:00Z
with open(path, "w") as out:
    for i in range(records):
        key = (i * 2_654_435_761) % keys if i >= keys else i
        kind = "order" if i % 2 == 0 else "payment"
        t = base + (i * hour) // records
        out.write(f'{{"id":{i},"user":{key},"kind":"{kind}","amount":{i % 1000},"time":{t}}}\n')
EOF
fi

pipeline() {  # name cache operator
  cat > "$work/$1.toml" <<EOF
[pipeline]
name = "$1"
state_cache_mb = $2
state_dir = "$work/state-$1"
max_out_of_orderness_ms = 1000

[source.file]
path = "$input"
timestamp_field = "time"

$3

[sink.blackhole]
EOF
  rm -rf "$work/state-$1"
}

window='[[operators]]
name = "per-user"
window = { tumbling_ms = 3_600_000 }
key_field = "user"
aggregates = [{ name = "orders", function = "count" }, { name = "total", function = "sum", field = "amount" }]'

join='[[operators]]
name = "orders-payments"
join = { left_field = "kind", left_value = "order", left_key = "user", right_field = "kind", right_value = "payment", right_key = "user", lower_ms = 0, upper_ms = 3_600_000 }'

echo "| state | keys | records | state_cache_mb | peak RSS MiB | CPU µs/record | wall s |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
measure() {  # kind operator
  for cache in $caches; do
    pipeline "$1-$cache" "$cache" "$2"
    stats="$work/$1-$cache.time"
    taskset -c 0 /usr/bin/time -o "$stats" -f "%M %U %S %e" \
      "$sluice" run --quiet "$work/$1-$cache.toml" > /dev/null
    read -r rss_kib user sys wall < "$stats"
    python3 -c "
rss, user, sys_, wall = $rss_kib, $user, $sys, $wall
print(f'| $1 | $keys | $records | $cache | {rss/1024:.0f} | {(user+sys_)*1e6/$records:.2f} | {wall:.1f} |')"
    rm -rf "$work/state-$1-$cache"
  done
}
measure window "$window"
[ -n "${SKIP_JOIN:-}" ] || measure join "$join"
