#!/usr/bin/env bash
# Scale-out figures (issue 39, ADR 0020), printed as tables for
# docs/benchmarks.md. Release build; needs the dev services
# (scripts/dev-services.sh up). Every process is a `sluice run` of a
# scaled-out pipeline; checkpoints go to a local directory (every process
# here sees it), so the figures are Sluice's and the broker's, not S3's.
#
# 1. Idle tasks: one process owning IDLE_TASKS (default 100) tasks of an
#    empty topic (identity plugin -> blackhole): threads, RSS, and the CPU
#    it uses in 30 s.
# 2. Scaling: RECORDS (default 10,000,000) JSON records on 8 partitions
#    through pii-redact -> blackhole, by 1 process pinned to core 0, then
#    by 2 processes pinned to cores 0 and 1: records/s in the steady state
#    (WINDOW_S seconds once every process is ready), and CPU µs/record per
#    process (the broker shares the two cores).
# 3. Repartition hop: half as many records, 1 process, identity -> window sum
#    per key (keys over all partitions), without and with `key_by` before
#    the window (one hop through a repartition topic, at-least-once):
#    CPU µs/record of each, the difference is the hop.
# 4. Moved task: RESTORE_KEYS (default 1,000,000) keys of running-count
#    state in one task; a second process takes the task over when the
#    first stops (SIGTERM, final checkpoint): partitions assigned ->
#    state restored -> task running, and the bytes restored.
#
# 5. Rebalance pause: latency of the tasks that stay with a process while
#    another joins, against before, and of the tasks that move.
# 6. Hop latency: 4,000 records/s (sent_ms in each) -> running-count ->
#    exactly-once Kafka, checkpoints every second, one process, without
#    and with `key_by` before the count: latency percentiles of each.
#
#   benches/scale-out.sh
#   SKIP_IDLE=1 SKIP_SCALING=1 benches/scale-out.sh     # 3, 4, 5 and 6
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice/target}"
cargo build --release -q -p sluice-cli
sluice="$CARGO_TARGET_DIR/release/sluice"
python="$HOME/.cache/sluice/venv-tools/bin/python"
kafka_libs=$(ls -d "$HOME"/.cache/sluice/kafka-*/libs | head -1)
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
hz=$(getconf CLK_TCK)
records="${RECORDS:-10000000}"
run_id="$RANDOM$RANDOM"

topic() { # name partitions
  java -cp "$kafka_libs/*" org.apache.kafka.tools.TopicCommand --bootstrap-server 127.0.0.1:9092 \
    --create --topic "$1" --partitions "$2" --replication-factor 1 >/dev/null
}
produce() { # topic count partitions keys
  "$python" - "$@" <<'EOF'
import sys
from confluent_kafka import Producer
topic, count, partitions, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
producer = Producer({"bootstrap.servers": "127.0.0.1:9092", "linger.ms": 50, "batch.size": 1000000})
t0 = 1_700_000_000_000
for i in range(count):
    value = b'{"id":%d,"key":"k%d","amount":%d,"ts":%d}' % (i, i % keys, i % 7 + 1, t0 + i)
    while True:
        try:
            producer.produce(topic, value, partition=i % partitions)
            break
        except BufferError:
            producer.poll(0.1)
producer.flush()
EOF
}
committed() { # group topic partitions -> sum of committed offsets, and the end
  "$python" - "$@" <<'EOF'
import sys
from confluent_kafka import Consumer, TopicPartition
group, topic, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = Consumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": group})
parts = [TopicPartition(topic, p) for p in range(partitions)]
done = sum(max(tp.offset, 0) for tp in c.committed(parts, timeout=10))
end = sum(c.get_watermark_offsets(tp, timeout=10)[1] for tp in parts)
print(done, end)
c.close()
EOF
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
status_field() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
health_port=$((20000 + RANDOM % 20000))
wait_ready() { # port
  until curl -sf "http://127.0.0.1:$1/readyz" >/dev/null 2>&1; do sleep 0.2; done
}
pipeline() { # file name topic group operators checkpoint-mode
  cat > "$1" <<EOF
[pipeline]
name = "$2"
batch_size = 512
max_out_of_orderness_ms = 1000

[checkpoints]
storage = "${STORAGE:-$work/checkpoints}"
interval_ms = ${CHECKPOINT_INTERVAL_MS:-2000}
mode = "$6"
${STORAGE_S3:-}

[source.kafka]
bootstrap_servers = "127.0.0.1:9092"
topics = ["$3"]
group_id = "$4"
start = "earliest"
value_format = "json"
timestamp_field = "ts"
scale_out = true

$5

[sink.blackhole]
EOF
}
identity="[[operators]]
name = \"identity\"
plugin = \"$PWD/plugins/identity\""
# Plugins built once, before anything is timed.
"$sluice" plugin build plugins/identity >/dev/null
"$sluice" plugin build plugins/running-count >/dev/null

if [ "${SKIP_IDLE:-0}" != 1 ]; then
# --- 1. idle tasks ------------------------------------------------------
tasks="${IDLE_TASKS:-100}"
idle="scale-idle-$run_id"
topic "$idle" "$tasks"
pipeline "$work/idle.toml" "idle-$run_id" "$idle" "idle-$run_id" "$identity" exactly-once
"$sluice" run "$work/idle.toml" --quiet --health "127.0.0.1:$health_port" 2>"$work/idle.log" &
pid=$!; pids+=("$pid")
wait_ready "$health_port"
sleep 10
before=$(cpu_ticks "$pid"); sleep 30; after=$(cpu_ticks "$pid")
echo
echo "| idle tasks in one process | threads | RSS MiB | idle CPU (30 s, % of one core) | per task |"
echo "| ---: | ---: | ---: | ---: | ---: |"
"$python" - "$tasks" "$(status_field "$pid" Threads)" "$(status_field "$pid" VmRSS)" "$before" "$after" "$hz" <<'EOF'
import sys
n, threads, rss, b, a, hz = map(int, sys.argv[1:])
cpu = (a - b) / hz / 30 * 100
print(f"| {n} | {threads} | {rss/1024:.0f} | {cpu:.1f} | {cpu/n:.3f} |")
EOF
kill "$pid"; wait "$pid" 2>/dev/null || true
fi

# Runs the processes given as "core" arguments on `file` until every group
# of `groups` ("group:topic:partitions,...") has committed all its input,
# then reads their CPU and stops them: prints "seconds ticks_1 ticks_2 ...".
run_until_drained() { # file groups cores...
  local file=$1 groups=$2; shift 2
  local started; started=$(date +%s.%N)
  local run_pids=() port=$health_port
  for core in "$@"; do
    port=$((port + 1))
    taskset -c "$core" "$sluice" run "$file" --quiet --health "127.0.0.1:$port" 2>>"$work/run.log" &
    run_pids+=("$!"); pids+=("$!")
  done
  local spec group topic partitions
  for spec in ${groups//,/ }; do
    IFS=: read -r group topic partitions <<<"$spec"
    while true; do
      read -r done end < <(committed "$group" "$topic" "$partitions")
      [ "$done" -ge "$end" ] && [ "$end" -gt 0 ] && break
      sleep 0.5
    done
  done
  local elapsed; elapsed=$(echo "$(date +%s.%N) - $started" | bc)
  local ticks=()
  for pid in "${run_pids[@]}"; do ticks+=("$(cpu_ticks "$pid")"); done
  for pid in "${run_pids[@]}"; do kill "$pid"; wait "$pid" 2>/dev/null || true; done
  echo "$elapsed ${ticks[*]}"
}

if [ "${SKIP_SCALING:-0}" != 1 ]; then
# --- 2. one process vs two ----------------------------------------------
# Steady state: once every process is ready (tasks split, restored), the
# records its group commits in WINDOW_S seconds, and its CPU meanwhile.
input="scale-in-$run_id"
topic "$input" 8
produce "$input" "$records" 8 100000
window_s="${WINDOW_S:-10}"
redact="[[operators]]
name = \"redact\"
plugin = \"$PWD/plugins/pii-redact\""
"$sluice" plugin build plugins/pii-redact >/dev/null
echo
echo "| processes (one core each) | records in ${window_s} s | records/s | CPU µs/record, each process | speed-up |"
echo "| ---: | ---: | ---: | --- | ---: |"
base=""
for cores in "0" "0 1"; do
  n=$(echo "$cores" | wc -w)
  name="scaling-$n-$run_id"
  CHECKPOINT_INTERVAL_MS=1000 pipeline "$work/$name.toml" "$name" "$input" "$name" "$redact" exactly-once
  run_pids=(); ports=()
  for core in $cores; do
    port=$((health_port + 20 + core))
    taskset -c "$core" "$sluice" run "$work/$name.toml" --quiet --health "127.0.0.1:$port" 2>>"$work/run.log" &
    run_pids+=("$!"); pids+=("$!"); ports+=("$port")
  done
  for port in "${ports[@]}"; do wait_ready "$port"; done
  sleep 3
  read -r before end < <(committed "$name" "$input" 8)
  ticks_before=(); for pid in "${run_pids[@]}"; do ticks_before+=("$(cpu_ticks "$pid")"); done
  started=$(date +%s.%N)
  sleep "$window_s"
  read -r after end < <(committed "$name" "$input" 8)
  elapsed=$(echo "$(date +%s.%N) - $started" | bc)
  ticks=(); for i in "${!run_pids[@]}"; do ticks+=("$(( $(cpu_ticks "${run_pids[$i]}") - ticks_before[i] ))"); done
  for pid in "${run_pids[@]}"; do kill "$pid"; wait "$pid" 2>/dev/null || true; done
  [ "$after" -lt "$end" ] || echo "(the input ran out: raise RECORDS)"
  rate=$(echo "($after - $before) / $elapsed" | bc -l)
  base=${base:-$rate}
  "$python" - "$((after - before))" "$elapsed" "$base" "$hz" "${ticks[@]}" <<'EOF'
import sys
n, wall, base, hz = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
ticks = [int(t) for t in sys.argv[5:]]
per = ", ".join(f"{t / hz * 1e6 / (n / len(ticks)):.2f}" for t in ticks)
print(f"| {len(ticks)} | {n:,} | {n / wall:,.0f} | {per} | {n / wall / base:.2f}x |")
EOF
done
fi

if [ "${SKIP_HOP:-0}" != 1 ]; then
# --- 3. the repartition hop ---------------------------------------------
hop_in="scale-hop-$run_id"
topic "$hop_in" 8
hop_records=$((records / 2))
produce "$hop_in" "$hop_records" 8 100000
window="[[operators]]
name = \"sum\"
window = { tumbling_ms = 1000 }
key_field = \"key\"
aggregate = { function = \"sum\", field = \"amount\" }"
echo
echo "| 1 process, core 0, $hop_records records | wall s | records/s | CPU µs/record |"
echo "| --- | ---: | ---: | ---: |"
for hop in without with; do
  name="hop-$hop-$run_id"
  ops="$identity

$window"
  [ "$hop" = with ] && ops="$identity

${window/key_field/key_by = \"key\"
key_field}"
  pipeline "$work/$name.toml" "$name" "$hop_in" "$name" "$ops" at-least-once
  groups="$name:$hop_in:8"
  [ "$hop" = with ] && groups="$groups,$name.stage-1:default.$name.sum-repartition:8"
  read -r wall ticks < <(run_until_drained "$work/$name.toml" "$groups" 0)
  "$python" - "$hop_records" "$wall" "$ticks" "$hz" "$hop" <<'EOF'
import sys
n, wall, ticks, hz, hop = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
print(f"| identity -> window, {hop} a key-by hop | {wall:.1f} | {n / wall:,.0f} | {ticks / hz * 1e6 / n:.2f} |")
EOF
done
fi

if [ "${SKIP_RESTORE:-0}" != 1 ]; then
# --- 4. a moved task's restore ------------------------------------------
keys="${RESTORE_KEYS:-1000000}"
restore_in="scale-restore-$run_id"
topic "$restore_in" 1
produce "$restore_in" "$keys" 1 "$keys"
name="restore-$run_id"
# From S3 (the dev services' server on loopback), as a moved task restores.
bucket="scale-restore-$run_id"
curl -sf -X PUT "http://127.0.0.1:9000/$bucket" -o /dev/null
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1
STORAGE="s3://$bucket/checkpoints" STORAGE_S3='s3 = { endpoint = "http://127.0.0.1:9000", region = "us-east-1" }' \
pipeline "$work/$name.toml" "$name" "$restore_in" "$name" "[[operators]]
name = \"count\"
plugin = \"$PWD/plugins/running-count\"" exactly-once
"$sluice" run "$work/$name.toml" --quiet --health "127.0.0.1:$((health_port + 10))" 2>"$work/first.log" &
first=$!; pids+=("$first")
while true; do
  read -r done end < <(committed "$name" "$restore_in" 1)
  [ "$done" -ge "$end" ] && break
  sleep 0.5
done
SLUICE_LOG=info "$sluice" run "$work/$name.toml" --quiet --health "127.0.0.1:$((health_port + 11))" 2>"$work/second.log" &
second=$!; pids+=("$second")
sleep 5
stopped_at=$(date +%s.%N)
kill "$first"; wait "$first" 2>/dev/null || true
wait_ready $((health_port + 11))
ready_at=$(date +%s.%N)
kill "$second"; wait "$second" 2>/dev/null || true
echo
echo "| moved task, $keys keys | SIGTERM -> ready s | assigned -> running s | state bytes | MB/s |"
echo "| ---: | ---: | ---: | ---: | ---: |"
"$python" - "$work/second.log" "$stopped_at" "$ready_at" <<'EOF'
import datetime, re, sys
log, stopped, ready = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
def at(pattern):
    for line in open(log):
        if pattern in line:
            stamp = re.match(r"(\S+)Z", line).group(1)
            return datetime.datetime.fromisoformat(stamp).replace(tzinfo=datetime.timezone.utc).timestamp()
assigned, running = at("partitions assigned to this process assigned={("), at("task running")
state = next(int(m.group(1)) for line in open(log) if (m := re.search(r"restored_bytes=(\d+)", line)))
took = running - assigned
print(f"| {ready - stopped:.2f} | {took:.2f} | {state:,} | {state / 1e6 / took:.0f} |")
EOF
fi
if [ "${SKIP_PAUSE:-0}" != 1 ]; then
# --- 5. the pause a rebalance causes -------------------------------------
# 4,000 records/s (sent_ms in each) into 8 partitions -> identity ->
# exactly-once Kafka, checkpoints every second; a read_committed reader
# measures now - sent_ms per record. Process A runs alone for 20 s, then
# process B joins (taking half the tasks) and both run 25 s more. Latency
# percentiles of the tasks that stayed with A, before and after B joined,
# and of the tasks that moved.
pause_in="scale-pause-in-$run_id"; pause_out="scale-pause-out-$run_id"
topic "$pause_in" 8; topic "$pause_out" 8
name="pause-$run_id"
CHECKPOINT_INTERVAL_MS=1000 pipeline "$work/$name.toml" "$name" "$pause_in" "$name" "$identity" exactly-once
sed -i "s|^\[sink.blackhole\]|[sink.kafka]\nbootstrap_servers = \"127.0.0.1:9092\"\ntopic = \"$pause_out\"|" "$work/$name.toml"
SLUICE_LOG=info "$sluice" run "$work/$name.toml" --quiet --health "127.0.0.1:$((health_port + 30))" 2>"$work/pause-a.log" &
a=$!; pids+=("$a")
wait_ready $((health_port + 30))
"$python" - "$pause_in" "$pause_out" "$work/pause-a.log" "$sluice" "$work/$name.toml" "$work/pause-b.log" <<'EOF'
import os, re, subprocess, sys, time
sys.path.insert(0, "benches")
from latency_probe import Probe, percentile as pct
topic_in, topic_out, log_a, sluice, pipeline, log_b = sys.argv[1:7]
probe = Probe(topic_in, topic_out, lambda i: {"id": i, "p": i % 8}).start()
time.sleep(20)
joined = time.time()
b = subprocess.Popen([sluice, "run", pipeline, "--quiet"], stderr=open(log_b, "w"), env={**os.environ, "SLUICE_LOG": "info"})
time.sleep(25)
probe.stop()
b.terminate(); b.wait()
seen = [(t, v["p"], l) for t, v, l in probe.seen]
moved = set()
for line in open(log_a):
    if "partitions revoked from this process" in line:
        moved |= {int(p) for p in re.findall(r'"[^"]+", (\d+)\)', line)}
rows = [
    ("tasks that stayed, before B joined", [l for t, p, l in seen if t < joined and t > joined - 15 and p not in moved]),
    ("tasks that stayed, 15 s after B joined", [l for t, p, l in seen if joined <= t < joined + 15 and p not in moved]),
    ("tasks that moved, 15 s after B joined", [l for t, p, l in seen if joined <= t < joined + 15 and p in moved]),
]
print()
print(f"| exactly-once, checkpoints every 1 s, 4,000 records/s, moved: {sorted(moved)} | records | p50 ms | p99 ms | max ms |")
print("| --- | ---: | ---: | ---: | ---: |")
for label, values in rows:
    print(f"| {label} | {len(values):,} | {pct(values, 0.5):.0f} | {pct(values, 0.99):.0f} | {max(values) if values else float('nan'):.0f} |")
EOF
kill "$a"; wait "$a" 2>/dev/null || true
fi

if [ "${SKIP_HOP_LATENCY:-0}" != 1 ]; then
# --- 6. the hop's latency -----------------------------------------------
# The same input rate and reader as 5, one process throughout: running-
# count keyed within the source partition, then the same with
# `key_by = "key"` (100 keys over all partitions) so that every record
# crosses a repartition topic, written and read exactly-once.
echo
echo "| exactly-once, checkpoints every 1 s, 4,000 records/s, 1 process | records | p50 ms | p99 ms | max ms |"
echo "| --- | ---: | ---: | ---: | ---: |"
for hop in without with; do
  lat_in="scale-lat-in-$hop-$run_id"; lat_out="scale-lat-out-$hop-$run_id"
  topic "$lat_in" 8; topic "$lat_out" 8
  name="lat-$hop-$run_id"
  count="[[operators]]
name = \"running-count\"
plugin = \"$PWD/plugins/running-count\""
  [ "$hop" = with ] && count="$count
key_by = \"key\""
  CHECKPOINT_INTERVAL_MS=1000 pipeline "$work/$name.toml" "$name" "$lat_in" "$name" "$count" exactly-once
  sed -i "s|^\[sink.blackhole\]|[sink.kafka]\nbootstrap_servers = \"127.0.0.1:9092\"\ntopic = \"$lat_out\"|" "$work/$name.toml"
  port=$((health_port + 40))
  "$sluice" run "$work/$name.toml" --quiet --health "127.0.0.1:$port" 2>"$work/$name.log" &
  lat_pid=$!; pids+=("$lat_pid")
  wait_ready "$port"
  "$python" - "$lat_in" "$lat_out" "$hop" <<'EOF'
import sys, time
sys.path.insert(0, "benches")
from latency_probe import Probe, percentile
topic_in, topic_out, hop = sys.argv[1:4]
probe = Probe(topic_in, topic_out, lambda i: {"id": i, "key": f"k{i % 100}"}).start()
started = time.time()
time.sleep(35)
probe.stop()
values = sorted(l for t, v, l in probe.seen if t > started + 10)
pct = lambda q: percentile(values, q)
print(f"| running-count, {hop} a key-by hop | {len(values):,} | {pct(0.5):.0f} | {pct(0.99):.0f} | {max(values) if values else float('nan'):.0f} |")
EOF
  kill "$lat_pid"; wait "$lat_pid" 2>/dev/null || true
done
fi
