"""Reads the bronze-to-silver example's tables with pyiceberg (an
independent Iceberg reader) and prints what is in them.

    query.py [--lake out/bronze-to-silver/lake] [--json]
"""

import argparse
import json
import os

from pyiceberg.catalog.sql import SqlCatalog

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", default=os.path.join(ROOT, "out/bronze-to-silver/lake"))
    parser.add_argument("--json", action="store_true", help="print one JSON summary")
    args = parser.parse_args()
    lake = os.path.abspath(args.lake)
    catalog = SqlCatalog(
        "sluice",
        uri=f"sqlite:///{lake}/catalog.db",
        warehouse=f"file://{lake}/warehouse",
    )
    silver = catalog.load_table("silver.orders").scan().to_arrow()
    dead = catalog.load_table("bronze.dead_letters").scan().to_arrow()
    ids = silver.column("event_id").to_pylist()
    late = sum(1 for flag in dead.column("late_arrival").to_pylist() if flag)
    summary = {
        "silver_rows": silver.num_rows,
        "silver_distinct_event_ids": len(set(ids)),
        "silver_amount": round(sum(silver.column("amount").to_pylist()), 2),
        "emails_in_clear": sum(
            1 for email in silver.column("email").to_pylist() if email and "***@" not in email
        ),
        "dead_letters": dead.num_rows,
        "late_arrivals": late,
        "snapshots": len(catalog.load_table("silver.orders").snapshots()),
    }
    if args.json:
        print(json.dumps(summary))
        return
    print(f"silver.orders: {summary['silver_rows']} rows, "
          f"{summary['silver_distinct_event_ids']} distinct event ids, "
          f"{summary['snapshots']} snapshots (one per checkpoint)")
    for row in silver.slice(0, 3).to_pylist():
        print(f"  {row}")
    print(f"\nbronze.dead_letters: {summary['dead_letters']} rows, {late} late arrivals")
    reasons = {}
    for reason, flag in zip(dead.column("reason").to_pylist(), dead.column("late_arrival").to_pylist()):
        key = ("late: " if flag else "") + reason.split(":")[0][:70]
        reasons[key] = reasons.get(key, 0) + 1
    for reason, count in sorted(reasons.items(), key=lambda item: -item[1]):
        print(f"  {count:6d}  {reason}")


if __name__ == "__main__":
    main()
