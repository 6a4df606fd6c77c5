"""Reads an Iceberg table with pyiceberg, the independent reader the tests
check Sluice's tables with. Prints one JSON document: the table's rows and
its snapshots' summaries in commit order.

    read_iceberg.py CATALOG_NAME CATALOG_DB WAREHOUSE_URI TABLE

CATALOG_DB is a SQLite file of the SQL catalog, or the http:// URI of a
REST catalog (WAREHOUSE_URI is then passed as its warehouse, if not empty).
"""

import json
import os
import sys

from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog


def main() -> None:
    name, database, warehouse, table_name = sys.argv[1:5]
    if database.startswith(("http://", "https://")):
        properties = {"uri": database}
        if warehouse:
            properties["warehouse"] = warehouse
        catalog = RestCatalog(name, **properties)
    else:
        properties = {"uri": f"sqlite:///{database}", "warehouse": warehouse}
        if warehouse.startswith("s3://"):
            # The test S3 server (moto) and its credentials.
            properties.update(
                {
                    "s3.endpoint": os.environ.get("SLUICE_S3_ENDPOINT", "http://127.0.0.1:9000"),
                    "s3.access-key-id": os.environ.get("AWS_ACCESS_KEY_ID", "sluice-test"),
                    "s3.secret-access-key": os.environ.get("AWS_SECRET_ACCESS_KEY", "sluice-test"),
                    "s3.region": os.environ.get("AWS_REGION", "us-east-1"),
                }
            )
        catalog = SqlCatalog(name, **properties)
    table = catalog.load_table(table_name)
    rows = table.scan().to_arrow().to_pylist()
    snapshots = [
        {
            "snapshot_id": snapshot.snapshot_id,
            "sequence_number": snapshot.sequence_number,
            "summary": dict(snapshot.summary.additional_properties) if snapshot.summary else {},
        }
        for snapshot in sorted(table.snapshots(), key=lambda s: s.sequence_number or 0)
    ]
    files = [task.file.file_path for task in table.scan().plan_files()]
    json.dump({"rows": rows, "snapshots": snapshots, "files": files}, sys.stdout, default=str)


if __name__ == "__main__":
    main()
