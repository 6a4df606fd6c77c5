"""Another writer for the commit-conflict test: appends COUNT rows, one
snapshot each, to TABLE of the REST catalog at URI (columns event_id,
user_id, ts), as fast as it can, then prints {"appended": COUNT,
"conflicts": N} (its own commits that lost a race and were retried). Its
event ids start with `other-`, so they never collide with the pipeline's.

    append_iceberg.py URI TABLE COUNT
"""

import datetime
import json
import sys
import time

import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import CommitFailedException


def main() -> None:
    uri, table_name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    catalog = RestCatalog("sluice", uri=uri)
    deadline = time.monotonic() + 120
    while True:
        try:
            table = catalog.load_table(table_name)
            break
        except Exception:  # the pipeline creates it
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    schema = pa.schema(
        [
            pa.field("event_id", pa.string(), nullable=False),
            pa.field("user_id", pa.int64()),
            pa.field("ts", pa.timestamp("us", tz="UTC")),
        ]
    )
    conflicts = 0
    for i in range(count):
        rows = pa.Table.from_pylist(
            [
                {
                    "event_id": f"other-{i}",
                    "user_id": -1,
                    "ts": datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc),
                }
            ],
            schema=schema,
        )
        while True:
            try:
                table.append(rows)
                break
            except CommitFailedException:
                conflicts += 1
                table = catalog.load_table(table_name)
    json.dump({"appended": count, "conflicts": conflicts}, sys.stdout)


if __name__ == "__main__":
    main()
