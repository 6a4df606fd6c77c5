#!/usr/bin/env bash
# How long a bounded Kafka run takes after the end of its input (issue 45,
# item 2): RECORDS JSON records (default 2,000,000) in a 4-partition topic
# -> the filter plugin -> an exactly-once Kafka sink, `bounded = true`,
# 1 s checkpoints to a local directory. Prints the run's summary line,
# which gives the whole run and the part after the end of the input (the
# final watermark, barrier, checkpoint and transaction commit, the offset
# commit, closing the clients). Needs `scripts/dev-services.sh up`.
#
#   benches/bounded-end.sh
#   RECORDS=500000 SLUICE_BIN=/tmp/sluice-before benches/bounded-end.sh
set -euo pipefail
cd "$(dirname "$0")/.."

records="${RECORDS:-2000000}"
bootstrap="${SLUICE_KAFKA_BOOTSTRAP:-127.0.0.1:9092}"
. benches/sluice-binary.sh
work="$(mktemp -d "${TMPDIR:-/tmp}/sluice-bounded-end.XXXXXX")"
trap 'rm -rf "$work"' EXIT
topic="bounded-end-$$-$RANDOM"
"$sluice" plugin build plugins/filter-rewrite --output "$work/filter.wasm" > /dev/null

python="${SLUICE_TOOLS_PYTHON:-$HOME/.cache/sluice/venv-tools/bin/python}"
"$python" - "$bootstrap" "$topic" <<'PY'
import sys
from confluent_kafka.admin import AdminClient, NewTopic
bootstrap, topic = sys.argv[1:]
admin = AdminClient({"bootstrap.servers": bootstrap})
for future in admin.create_topics([NewTopic(name, 4, 1) for name in (topic, topic + "-out")]).values():
    future.result()
PY

cat > "$work/fill.toml" <<EOF
[pipeline]
name = "fill-$topic"

[source.generator]
profile = "bronze"
count = $records
invalid_ratio = 0.0
duplicate_ratio = 0.0

[sink.kafka]
bootstrap_servers = "$bootstrap"
topic = "$topic"
EOF
"$sluice" run "$work/fill.toml" --quiet > /dev/null 2>&1

cat > "$work/bounded.toml" <<EOF
[pipeline]
name = "bounded-$topic"
batch_size = 1024
state_dir = "$work/state"

[checkpoints]
storage = "$work/checkpoints"
interval_ms = 1000
mode = "exactly-once"

[source.kafka]
bootstrap_servers = "$bootstrap"
topics = ["$topic"]
group_id = "$topic"
start = "earliest"
bounded = true

[[operators]]
name = "filter"
plugin = "$work/filter.wasm"
config = { filter_field = "user_id", rewrite_field = "email" }

[sink.kafka]
bootstrap_servers = "$bootstrap"
topic = "$topic-out"
EOF
/usr/bin/time -f "process: %e s wall, %U s user, %S s sys" \
  "$sluice" run "$work/bounded.toml" --quiet 2>&1 | grep -E "^completed|^stopped|^process|not (confirmed|answered)"
