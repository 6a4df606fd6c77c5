#!/usr/bin/env bash
# How long a file pipeline restored at the end of its input takes to run
# again (issue 45, recovery): LINES JSON lines (default 1,000,000, ~107
# bytes each) -> a keyed 1 h window count -> blackhole, checkpoints to a
# local directory. One run to the end, then REPEAT runs (default 3) that
# restore at the last line, read nothing and end; each prints its wall and
# CPU time. The restore steps over the lines before its position.
#
#   benches/file-restore.sh
#   SLUICE_BIN=/tmp/sluice-before benches/file-restore.sh
set -euo pipefail
cd "$(dirname "$0")/.."

lines="${LINES:-1000000}"
repeat="${REPEAT:-3}"
. benches/sluice-binary.sh
work="$(mktemp -d "${TMPDIR:-/tmp}/sluice-file-restore.XXXXXX")"
trap 'rm -rf "$work"' EXIT

python3 - "$lines" >"$work/input.jsonl" <<'PY'
import sys
write = sys.stdout.write
for i in range(int(sys.argv[1])):
    write('{"id":%d,"key":"k%d","ts":%d,"text":"some words to make the line a bit longer than short"}\n'
          % (i, i % 1000, 1700000000000 + i))
PY
cat >"$work/pipeline.toml" <<'TOML'
sink = { blackhole = {} }

[pipeline]
name = "file-restore"
state_dir = "state"

[checkpoints]
storage = "checkpoints"
interval_ms = 60000

[source.file]
path = "input.jsonl"
timestamp_field = "ts"

[[operators]]
name = "per-key"
window = { tumbling_ms = 3600000 }
key_field = "key"
aggregate = { function = "count" }
TOML

cd "$work"
"$sluice" run pipeline.toml --quiet >/dev/null 2>&1
for _ in $(seq "$repeat"); do
  /usr/bin/time -f "run again at line $lines: %e s wall, %U s user, %S s sys" \
    "$sluice" run pipeline.toml --quiet 2>&1 >/dev/null | grep -E "^run again|records in"
done
