#!/usr/bin/env bash
# PostgreSQL upsert sink figures (issue 43, ADR 0021), printed as tables for
# docs/benchmarks.md. Release build; needs the dev services
# (scripts/dev-services.sh up: PostgreSQL on 127.0.0.1:55432, Kafka).
#
# 1. Throughput: RECORDS (default 1,000,000) updates over KEYS (default
#    100,000) keys from a JSON-lines file into one table, per mode
#    (at-least-once; on-checkpoint with exactly-once checkpoints every
#    second) and batch size (the pipeline's batch_size and the sink's
#    batch_rows together: a statement holds at most one pipeline batch).
#    Wall time, rows/s, CPU µs/row of the sluice process and of the
#    PostgreSQL server processes (user + sys, from /proc), and a check
#    that the table holds the newest value of every key.
# 2. Statement shape, server side: BATCHES batches of 10,000 rows applied
#    by psql as `INSERT ... SELECT FROM UNNEST(text[]...) ON CONFLICT`
#    (what the sink sends) and as `COPY` into a temporary table plus one
#    `INSERT ... SELECT ... ON CONFLICT`: ms per batch.
# 3. Latency: LATENCY_RATE (default 4,000) records/s, each with its send
#    time, through Kafka -> sluice -> the table for LATENCY_S (default 20)
#    seconds per mode; a trigger records send -> written (clock_timestamp()
#    in the statement that writes the row, which commits with it) per row.
#
#   benches/postgres.sh
#   SKIP_THROUGHPUT=1 benches/postgres.sh      # 2 and 3
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice/target}"
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -q -p sluice-cli
sluice="$CARGO_TARGET_DIR/release/sluice"
python="$HOME/.cache/sluice/venv-tools/bin/python"
pg="${SLUICE_POSTGRES_URL:-postgres://postgres@127.0.0.1:55432/postgres}"
records=${RECORDS:-1000000}
keys=${KEYS:-100000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

psql_q() { psql "$pg" -X -q -At -v ON_ERROR_STOP=1 -c "$1"; }

# CPU ticks (user + sys) of the PostgreSQL server: every live server
# process's own, plus what the postmaster collected from the backends that
# ended (cutime + cstime): a connection's backend exits with it.
postgres_ticks() {
  local total=0 pid fields
  for pid in $(pgrep -u postgres postgres || true); do
    fields=$(cut -d' ' -f14-17 "/proc/$pid/stat" 2>/dev/null || echo "0 0 0 0")
    for tick in $fields; do total=$((total + tick)); done
  done
  echo "$total"
}
ticks_per_s=$(getconf CLK_TCK)

if [ -z "${SKIP_THROUGHPUT:-}" ]; then
  awk -v n="$records" -v k="$keys" 'BEGIN { for (i = 0; i < n; i++) printf "{\"id\": %d, \"n\": %d, \"note\": \"update %d of key %d\"}\n", i % k, i, i, i % k }' >"$work/in.jsonl"
  echo
  echo "| mode | batch | wall s | rows/s | sluice CPU µs/row | PostgreSQL CPU µs/row | newest value of every key |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
  for mode in at-least-once on-checkpoint; do
    for batch in 100 1000 10000; do
      psql_q "DROP TABLE IF EXISTS bench_upsert, bench_upsert_sluice_staging"
      checkpoints=""
      if [ "$mode" = on-checkpoint ]; then
        checkpoints=$'[checkpoints]\nstorage = "checkpoints"\ninterval_ms = 1000\nmode = "exactly-once"\n'
      fi
      rm -rf "$work/checkpoints"
      cat >"$work/pipeline.toml" <<TOML
[pipeline]
name = "bench-postgres"
batch_size = $batch

$checkpoints
[source.file]
path = "in.jsonl"

[sink.postgres]
url = "$pg"
table = "bench_upsert"
key = ["id"]
columns = { id = "bigint", n = "bigint", note = "text" }
create = true
mode = "$mode"
batch_rows = $batch
TOML
      before=$(postgres_ticks)
      /usr/bin/time -f "%e %U %S" -o "$work/time" "$sluice" run --quiet "$work/pipeline.toml" 2>"$work/run.log"
      sleep 1   # its backends end and are collected by the postmaster
      after=$(postgres_ticks)
      read -r wall user sys <"$work/time"
      check=$(psql_q "SELECT count(*) = $keys AND bool_and(n >= $records - $keys) FROM bench_upsert")
      awk -v mode="$mode" -v batch="$batch" -v wall="$wall" -v user="$user" -v sys="$sys" \
        -v n="$records" -v pg=$((after - before)) -v hz="$ticks_per_s" -v ok="$check" \
        'BEGIN { printf "| %s | %d | %.1f | %.0f | %.2f | %.2f | %s |\n", mode, batch, wall, n / wall, (user + sys) * 1e6 / n, pg / hz * 1e6 / n, (ok == "t" ? "yes" : "NO") }'
    done
  done
fi

if [ -z "${SKIP_SHAPE:-}" ]; then
  batches=${BATCHES:-20}
  psql_q "DROP TABLE IF EXISTS bench_shape; CREATE TABLE bench_shape (id bigint PRIMARY KEY, n bigint, note text, sluice_version bigint NOT NULL)"
  # One batch of 10,000 rows as the sink sends it: a text[] per column.
  "$python" - "$work/unnest.sql" "$work/copy.sql" "$batches" <<'PY'
import sys
unnest_path, copy_path, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = 10_000
with open(unnest_path, "w") as out:
    for b in range(batches):
        ids = ",".join(str((b * 7919 + i) % 100_000) for i in range(rows))
        ns = ",".join(str(b * rows + i) for i in range(rows))
        notes = ",".join(f'"note {b} {i}"' for i in range(rows))
        out.write(
            "INSERT INTO bench_shape (id, n, note, sluice_version) SELECT u.c0::bigint, u.c1::bigint, u.c2::text, u.v "
            f"FROM UNNEST('{{{ids}}}'::text[], '{{{ns}}}'::text[], '{{{notes}}}'::text[], array_fill({b}::bigint, ARRAY[{rows}])) AS u(c0, c1, c2, v) "
            "ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n, note = EXCLUDED.note, sluice_version = EXCLUDED.sluice_version "
            "WHERE bench_shape.sluice_version <= EXCLUDED.sluice_version;\n"
        )
with open(copy_path, "w") as out:
    for b in range(batches):
        out.write("BEGIN; CREATE TEMP TABLE batch (id bigint, n bigint, note text, v bigint) ON COMMIT DROP;\n")
        out.write("COPY batch FROM STDIN;\n")
        for i in range(rows):
            out.write(f"{(b * 7919 + i) % 100_000}\t{b * rows + i}\tnote {b} {i}\t{b}\n")
        out.write("\\.\n")
        out.write(
            "INSERT INTO bench_shape (id, n, note, sluice_version) SELECT id, n, note, v FROM batch "
            "ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n, note = EXCLUDED.note, sluice_version = EXCLUDED.sluice_version "
            "WHERE bench_shape.sluice_version <= EXCLUDED.sluice_version; COMMIT;\n"
        )
PY
  shape() {
    local file=$1 start end
    psql_q "TRUNCATE bench_shape"
    start=$(date +%s.%N)
    psql "$pg" -X -q -v ON_ERROR_STOP=1 -f "$file" >/dev/null
    end=$(date +%s.%N)
    awk -v s="$start" -v e="$end" -v b="$batches" 'BEGIN { printf "%.1f", (e - s) * 1000 / b }'
  }
  echo
  echo "| statement shape, $batches batches of 10,000 rows | ms per batch |"
  echo "| --- | ---: |"
  echo "| INSERT ... SELECT FROM UNNEST(text[] per column) ON CONFLICT (the sink) | $(shape "$work/unnest.sql") |"
  echo "| COPY into a temporary table + INSERT ... SELECT ... ON CONFLICT | $(shape "$work/copy.sql") |"
fi

if [ -z "${SKIP_LATENCY:-}" ]; then
  rate=${LATENCY_RATE:-4000}
  seconds=${LATENCY_S:-20}
  echo
  echo "| mode, $rate records/s for $seconds s | rows | p50 ms | p99 ms | max ms |"
  echo "| --- | ---: | ---: | ---: | ---: |"
  for mode in at-least-once on-checkpoint; do
    topic="bench-postgres-latency-$mode-$$"
    psql_q "DROP TABLE IF EXISTS bench_latency, bench_latency_sluice_staging, bench_latency_seen;
      CREATE TABLE bench_latency (id bigint PRIMARY KEY, sent_ms bigint, sluice_version bigint NOT NULL);
      CREATE TABLE bench_latency_seen (ms double precision);
      CREATE OR REPLACE FUNCTION bench_latency_seen() RETURNS trigger AS \$\$ BEGIN
        INSERT INTO bench_latency_seen VALUES (extract(epoch FROM clock_timestamp()) * 1000 - NEW.sent_ms);
        RETURN NEW; END \$\$ LANGUAGE plpgsql;
      CREATE TRIGGER bench_latency_seen AFTER INSERT OR UPDATE ON bench_latency
        FOR EACH ROW EXECUTE FUNCTION bench_latency_seen();"
    checkpoints=$'[checkpoints]\nstorage = "checkpoints"\ninterval_ms = 1000\nmode = "exactly-once"\n'
    rm -rf "$work/checkpoints"
    cat >"$work/latency.toml" <<TOML
[pipeline]
name = "bench-postgres-latency"

$checkpoints
[source.kafka]
bootstrap_servers = "127.0.0.1:9092"
topics = ["$topic"]
group_id = "$topic"
start = "earliest"
value_format = "json"

[sink.postgres]
url = "$pg"
table = "bench_latency"
key = ["id"]
columns = ["id", "sent_ms"]
mode = "$mode"
TOML
    "$python" - "$topic" <<'PY'
from confluent_kafka.admin import AdminClient, NewTopic
import sys
admin = AdminClient({"bootstrap.servers": "127.0.0.1:9092"})
admin.create_topics([NewTopic(sys.argv[1], 4, 1)])[sys.argv[1]].result()
PY
    "$sluice" run --quiet "$work/latency.toml" 2>"$work/latency.log" &
    pid=$!
    sleep 3   # started and reading before the first record is sent
    "$python" - "$topic" "$rate" "$seconds" <<'PY'
import json, sys, time
from confluent_kafka import Producer
topic, rate, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
producer = Producer({"bootstrap.servers": "127.0.0.1:9092", "linger.ms": 5})
start = time.time()
i = 0
while time.time() - start < seconds:
    delay = start + i / rate - time.time()
    if delay > 0:
        time.sleep(delay)
    producer.produce(topic, json.dumps({"id": i, "sent_ms": int(time.time() * 1000)}).encode())
    producer.poll(0)
    i += 1
producer.flush()
print(i, file=sys.stderr)
PY
    sleep 3
    kill -TERM "$pid"
    wait "$pid" || true
    psql_q "SELECT '| $mode | ' || count(*) || ' | ' || round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric)
      || ' | ' || round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric) || ' | ' || round(max(ms)::numeric) || ' |'
      FROM bench_latency_seen"
  done
fi
