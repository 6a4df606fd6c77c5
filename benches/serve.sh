#!/usr/bin/env bash
# `sluice serve` overheads, printed as tables (docs/benchmarks.md):
#
# 1. Idle pipelines: memory (RSS) and threads of one server before and
#    after 100 idle pipelines of 10 tenants (Kafka source on an empty topic
#    -> identity plugin -> blackhole, checkpoints every 10 s), and the CPU
#    the server uses in 30 s with all of them idle.
# 2. Neighbour impact: tenant B's pipeline (1,000,000 generated orders ->
#    pii-redact -> blackhole) alone, then beside tenant A's busy-looping and
#    memory-bombing plugins (A limited to NOISY_CPU cores, default 0.25), alternating for
#    NEIGHBOUR_ROUNDS rounds (default 3).
#
# 3. API load: B's same pipeline beside 10 tenants' paced pipelines
#    (2,000 records/s each), alone and while those tenants send mixed API
#    requests (10 clients, 10 requests a second each: lists, status,
#    metrics, logs, checkpoints, and refused creates, uploads and deletes), alternating
#    for NEIGHBOUR_ROUNDS rounds; the answers' statuses are counted.
#
#   benches/serve.sh                                 # all three
#   SKIP_IDLE=1 benches/serve.sh                     # 2 and 3
#   SKIP_IDLE=1 SKIP_NEIGHBOUR=1 benches/serve.sh    # the API load only
#   SKIP_NEIGHBOUR=1 SKIP_API_LOAD=1 benches/serve.sh  # idle pipelines only
#
# Needs the dev services (scripts/dev-services.sh up).
#   benches/serve.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice/target}"
cargo build --release -q -p sluice-cli
sluice="$CARGO_TARGET_DIR/release/sluice"
python="$HOME/.cache/sluice/venv-tools/bin/python"
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
server="http://127.0.0.1:$port"
cleanup() {
  if [ -n "${serve_pid:-}" ]; then kill "$serve_pid" 2>/dev/null; wait "$serve_pid" 2>/dev/null; fi
  rm -rf "$work"
}
trap cleanup EXIT


start_server() { # a fresh server on $port; sets serve_pid and admin
  rm -rf "$work/state"
  "$sluice" serve --state-dir "$work/state" --listen "127.0.0.1:$port" 2>"$work/serve.log" &
  serve_pid=$!
  until grep -q "listening on" "$work/serve.log" 2>/dev/null; do sleep 0.2; done
  admin=$(sed -n 's/.*stored hashed): //p' "$work/serve.log" | head -1)
}
status_field() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$serve_pid/status"; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$serve_pid/stat"; }
hz=$(getconf CLK_TCK)
produce() { # topic value count
  "$python" - "$1" "$2" "$3" <<'EOF'
import sys
from confluent_kafka import Producer
topic, value, count = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
producer = Producer({"bootstrap.servers": "127.0.0.1:9092", "linger.ms": 50})
for _ in range(count):
    while True:
        try:
            producer.produce(topic, value)
            break
        except BufferError:
            producer.poll(0.1)
producer.flush()
EOF
}
state_of() { # token pipeline
  SLUICE_TOKEN="$1" "$sluice" pipelines show "$2" --server "$server" --json \
    | "$python" -c 'import json,sys; print(json.load(sys.stdin)["state"])'
}

if [ "${SKIP_IDLE:-0}" != 1 ]; then
# --- 1. idle pipelines ---------------------------------------------------
start_server
idle_topic="serve-idle-$RANDOM"
produce "$idle_topic" "warm-up" 1
rss_before=$(status_field VmRSS); threads_before=$(status_field Threads)
for t in $(seq 1 10); do
  token=$(SLUICE_TOKEN="$admin" "$sluice" tenants create "t$t" --max-pipelines 20 --kafka 127.0.0.1:9092 \
    --read-topic-prefix serve-idle- --topic-prefix "t$t." --group-prefix idle- --server "$server" --json \
    | "$python" -c 'import json,sys; print(json.load(sys.stdin)["token"])')
  for p in $(seq 1 10); do
    cat > "$work/p.toml" <<EOF
[pipeline]
name = "idle-$p"

[source.kafka]
bootstrap_servers = "127.0.0.1:9092"
topics = ["$idle_topic"]
group_id = "idle-t$t-$p"

[[operators]]
name = "identity"
plugin = "$PWD/plugins/identity"

[sink.blackhole]
EOF
    SLUICE_TOKEN="$token" "$sluice" deploy "$work/p.toml" --server "$server" >/dev/null
  done
done
sleep 15
rss_after=$(status_field VmRSS); threads_after=$(status_field Threads)
thread_ticks() { # "name|ticks" per thread name, summed
  for stat in /proc/"$serve_pid"/task/*/stat; do
    # comm is in parentheses and may hold spaces: split around them.
    sed -E 's/^[0-9]+ \((.*)\) [A-Za-z] (.*)$/\1|\2/' "$stat" 2>/dev/null
  done | awk -F'|' '{ split($2, f, " "); t[$1] += f[11] + f[12] } END { for (n in t) print n "|" t[n] }'
}
thread_ticks >"$work/threads-before"
ticks_before=$(cpu_ticks); sleep 30; ticks_after=$(cpu_ticks)
thread_ticks >"$work/threads-after"
echo
echo "| pipelines | RSS before MiB | RSS after MiB | per pipeline MiB | threads before | threads after | per pipeline | idle CPU (30 s, % of one core) |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
"$python" - "$rss_before" "$rss_after" "$threads_before" "$threads_after" "$ticks_before" "$ticks_after" "$hz" <<'EOF'
import sys
rb, ra, tb, ta, cb, ca, hz = map(int, sys.argv[1:])
cpu = (ca - cb) / hz / 30 * 100
print(f"| 100 | {rb/1024:.0f} | {ra/1024:.0f} | {(ra-rb)/1024/100:.2f} | {tb} | {ta} | {(ta-tb)/100:.1f} | {cpu:.1f} |")
EOF
echo
echo "| thread name (100 idle pipelines) | threads | idle CPU (30 s, % of one core) |"
echo "| --- | ---: | ---: |"
"$python" - "$work/threads-before" "$work/threads-after" "$hz" "$serve_pid" <<'EOF'
import collections, glob, sys
def read(path):
    return {n: int(t) for n, t in (line.rstrip("\n").rsplit("|", 1) for line in open(path) if "|" in line)}
before, after, hz = read(sys.argv[1]), read(sys.argv[2]), int(sys.argv[3])
counts = collections.Counter()
for comm in glob.glob(f"/proc/{sys.argv[4]}/task/*/comm"):
    try:
        counts[open(comm).read().strip()] += 1
    except OSError:
        pass
used = sorted(((after[n] - before.get(n, 0), n) for n in after), reverse=True)
for ticks, name in used[:8]:
    print(f"| {name} | {counts.get(name, 0)} | {ticks / hz / 30 * 100:.1f} |")
EOF

# /metrics with the 100 pipelines: what one scrape costs the server (the
# admin token sees every tenant), timed by curl from the first byte asked
# to the last received, 30 scrapes.
for _ in $(seq 1 30); do
  curl -sf -H "Authorization: Bearer $admin" "$server/metrics" -o "$work/metrics.txt" \
    -w '%{time_total}\n'
done | sort -g >"$work/scrape-times"
echo
echo "| /metrics, 100 pipelines of 10 tenants | bytes | samples | p50 ms | p99 ms | max ms |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
"$python" - "$work/scrape-times" "$(wc -c <"$work/metrics.txt")" "$(grep -vc '^#' "$work/metrics.txt")" <<'EOF'
import sys
times = [float(line) * 1000 for line in open(sys.argv[1]) if line.strip()]
n = len(times)
p = lambda q: times[min(n - 1, int(q * n))]
print(f"| admin scrape ({n}x) | {int(sys.argv[2]):,} | {int(sys.argv[3]):,} | {p(0.5):.1f} | {p(0.99):.1f} | {times[-1]:.1f} |")
EOF
kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true
unset serve_pid

fi

# --- shared by 2 and 3 ---------------------------------------------------
rounds="${NEIGHBOUR_ROUNDS:-3}"
median_ratio() { # label: the median of the ratios on standard input
  sort -g | awk -v label="$1" '{ v[NR] = $1 } END { printf "\nmedian beside / alone over %d rounds: %.3f (%s)\n", NR, (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, label }'
}
ratio_row() { # records alone_s alone_ticks beside_s beside_ticks round: a table row
  "$python" - "$@" "$hz" <<'EOF'
import sys
n = int(sys.argv[1]); a, at, b, bt, hz = float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[7])
print(f"| {sys.argv[6]} | {n/a:,.0f} | {at/hz*1e6/n:.2f} | {n/b:,.0f} | {bt/hz*1e6/n:.2f} | {a/b:.3f} |")
EOF
}
run_quiet() { # name -> "records seconds cpu_seconds"
  cat > "$work/q.toml" <<EOF
[pipeline]
name = "$1"

[source.generator]
profile = "bronze"
count = 1000000
invalid_ratio = 0.0

[[operators]]
name = "pii-redact"
plugin = "$PWD/plugins/pii-redact"

[sink.blackhole]
EOF
  local cpu0 start
  cpu0=$(cpu_ticks); start=$(date +%s.%N)
  SLUICE_TOKEN="$quiet" "$sluice" deploy "$work/q.toml" --server "$server" >/dev/null
  until [ "$(state_of "$quiet" "$1")" = finished ]; do sleep 0.1; done
  echo "1000000 $("$python" -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$start" "$(date +%s.%N)") $(( $(cpu_ticks) - cpu0 ))"
}

if [ "${SKIP_NEIGHBOUR:-0}" != 1 ]; then
# --- 2. neighbour impact -------------------------------------------------
start_server
quiet=$(SLUICE_TOKEN="$admin" "$sluice" tenants create quiet --server "$server" --json \
  | "$python" -c 'import json,sys; print(json.load(sys.stdin)["token"])')
noisy=$(SLUICE_TOKEN="$admin" "$sluice" tenants create noisy --cpu-cores "${NOISY_CPU:-0.25}" \
  --kafka 127.0.0.1:9092 --topic-prefix serve- --server "$server" --json \
  | "$python" -c 'import json,sys; print(json.load(sys.stdin)["token"])')
# A first run builds and compiles the plugin: not measured.
read -r _ _ _ < <(run_quiet warm-up)
declare -A noisy_topic
for kind in loop alloc; do
  noisy_topic[$kind]="serve-$kind-$RANDOM"
  produce "${noisy_topic[$kind]}" "$kind" 200000
done
noisy_up() { # round: deploys A's two hostile pipelines (fresh consumer groups)
  for kind in loop alloc; do
    cat > "$work/n.toml" <<EOF
[pipeline]
name = "$kind-$1"

[source.kafka]
bootstrap_servers = "127.0.0.1:9092"
topics = ["${noisy_topic[$kind]}"]
group_id = "${noisy_topic[$kind]}-$1"

[[operators]]
name = "hostile"
plugin = "$PWD/plugins/hostile-$kind"
deadline_ms = 50
memory_limit_mb = 16

[sink.blackhole]

[dead_letter.blackhole]
EOF
    SLUICE_TOKEN="$noisy" "$sluice" deploy "$work/n.toml" --server "$server" >/dev/null
  done
  # Until both are faulting (their plugins running), not a fixed wait.
  until [ "$(state_of "$noisy" "loop-$1")" = running ] && [ "$(state_of "$noisy" "alloc-$1")" = running ]; do sleep 0.2; done
  sleep 2
}
noisy_down() { # round
  for kind in loop alloc; do
    SLUICE_TOKEN="$noisy" "$sluice" pipelines rm "$kind-$1" --server "$server" >/dev/null
  done
}
# Alone and beside alternate, so that a change in the machine's load hits
# both; the median ratio is the figure.
echo
echo "| round | B alone records/s | server CPU µs/record | B beside A records/s | server CPU µs/record | beside / alone |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
ratios=()
for round in $(seq 1 "$rounds"); do
  read -r n alone_s alone_ticks < <(run_quiet "alone-$round")
  noisy_up "$round"
  read -r n beside_s beside_ticks < <(run_quiet "beside-$round")
  noisy_down "$round"
  line=$(ratio_row "$n" "$alone_s" "$alone_ticks" "$beside_s" "$beside_ticks" "$round")
  echo "$line"
  ratios+=("$(echo "$line" | awk -F'|' '{ gsub(/ /, "", $7); print $7 }')")
done
printf '%s\n' "${ratios[@]}" | median_ratio "A limited to ${NOISY_CPU:-0.25} CPU; CPU is the whole server's, A's included"
kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true
fi

# --- 3. API load ---------------------------------------------------------
[ "${SKIP_API_LOAD:-0}" = 1 ] && exit 0
start_server
quiet=$(SLUICE_TOKEN="$admin" "$sluice" tenants create quiet --max-pipelines 100 --server "$server" --json \
  | "$python" -c 'import json,sys; print(json.load(sys.stdin)["token"])')
read -r _ _ _ < <(run_quiet warm-up)
: > "$work/tokens"
printf '[pipeline]\nname = "steady"\n[source.generator]\nprofile = "bronze"\nrate = 2000\n[sink.blackhole]\n' > "$work/s.toml"
for t in $(seq 0 9); do
  token=$(SLUICE_TOKEN="$admin" "$sluice" tenants create "t$t" --server "$server" --json \
    | "$python" -c 'import json,sys; print(json.load(sys.stdin)["token"])')
  echo "$token" >> "$work/tokens"
  SLUICE_TOKEN="$token" "$sluice" deploy "$work/s.toml" --server "$server" >/dev/null
done
while read -r token; do
  until [ "$(state_of "$token" steady)" = running ]; do sleep 0.2; done
done < "$work/tokens"
api_load() { # 10 clients, one per tenant, until $work/stop exists; prints "requests {status: count}"
  "$python" - "$server" "$work/tokens" "$work/stop" <<'EOF'
import collections, os, sys, threading, time, urllib.request, urllib.error
server, tokens, stop = sys.argv[1], open(sys.argv[2]).read().split(), sys.argv[3]
counts, lock = collections.Counter(), threading.Lock()
bad = b'[pipeline]\nname = "bad"\n[source.kafka]\nbootstrap_servers = "x:1"\ntopics = ["t"]\ngroup_id = "g"\n[sink.blackhole]\n'
def client(index, token):
    other = f"t{(index + 1) % len(tokens)}"
    requests = [
        ("GET", "/api/v1/pipelines", None), ("GET", "/api/v1/pipelines/steady", None),
        ("GET", "/api/v1/pipelines/steady/status", None), ("GET", "/metrics", None),
        ("GET", "/api/v1/pipelines/steady/logs", None), ("GET", "/api/v1/pipelines/steady/checkpoints", None),
        ("POST", "/api/v1/pipelines", bad), ("POST", "/api/v1/plugins", bytes(512)),
        ("GET", "/api/v1/status", None), ("DELETE", f"/api/v1/pipelines/{other}-steady", None),
    ]
    i = 0
    while not os.path.exists(stop):
        method, path, body = requests[i % len(requests)]
        i += 1
        request = urllib.request.Request(server + path, data=body, method=method,
                                         headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status = response.status
                response.read()
        except urllib.error.HTTPError as error:
            status = error.code
        with lock:
            counts[status] += 1
        # 10 requests a second per client, 100 in all: the API load of a
        # busy team, from a client that itself takes little of the
        # machine's 2 cores.
        time.sleep(0.1)
threads = [threading.Thread(target=client, args=(i, t)) for i, t in enumerate(tokens)]
for thread in threads: thread.start()
for thread in threads: thread.join()
print(sum(counts.values()), dict(sorted(counts.items())))
EOF
}
echo
echo "| round | B alone records/s | server CPU µs/record | B beside API load records/s | server CPU µs/record | beside / alone | API requests, statuses |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
ratios=()
for round in $(seq 1 "$rounds"); do
  read -r n alone_s alone_ticks < <(run_quiet "api-alone-$round")
  rm -f "$work/stop"
  api_load > "$work/load.out" &
  load_pid=$!
  read -r n beside_s beside_ticks < <(run_quiet "api-beside-$round")
  touch "$work/stop"; wait "$load_pid"
  line=$(ratio_row "$n" "$alone_s" "$alone_ticks" "$beside_s" "$beside_ticks" "$round")
  echo "$line $(cat "$work/load.out") |"
  ratios+=("$(echo "$line" | awk -F'|' '{ gsub(/ /, "", $7); print $7 }')")
done
printf '%s\n' "${ratios[@]}" | median_ratio "10 tenants' API clients at 10 requests/s each beside their 10 pipelines paced at 2,000 records/s; CPU is the whole server's, the API's included"
