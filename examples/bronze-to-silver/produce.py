"""Produces Bronze order events for the bronze-to-silver example with
Confluent's own Avro serializer (Confluent wire format; the schema is
registered under <topic>-value), and prints what a correct pipeline must
make of them.

    produce.py [--topic orders-bronze] [--count 20000] [--seed 7]
               [--bootstrap 127.0.0.1:9092]
               [--registry http://127.0.0.1:8081/apis/ccompat/v7]

Events span 10 minutes of event time, roughly in order (up to 2 s of
disorder). Among them:
  * invalid events (a missing e-mail or an empty currency): dead letters;
  * duplicates (an event sent again with the same event_id): dropped;
  * late events (event time 5 minutes behind the rest, sent at the end):
    valid, so they reach the Silver table, but too late for the
    per-customer minute totals, so they are dead letters of the window
    with late_arrival = true.
"""

import argparse
import json
import os
import random

from confluent_kafka import SerializingProducer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer

HERE = os.path.dirname(os.path.abspath(__file__))
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SPAN_MS = 10 * 60 * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", default="orders-bronze")
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--registry", default="http://127.0.0.1:8081/apis/ccompat/v7")
    args = parser.parse_args()

    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    futures = admin.create_topics([NewTopic(args.topic, num_partitions=1, replication_factor=1)])
    for future in futures.values():
        try:
            future.result()
        except Exception as error:  # the topic may exist from an earlier run
            if "TOPIC_ALREADY_EXISTS" not in str(error):
                raise

    with open(os.path.join(HERE, "order.avsc"), encoding="utf-8") as f:
        schema = f.read()
    registry = SchemaRegistryClient({"url": args.registry})
    producer = SerializingProducer(
        {
            "bootstrap.servers": args.bootstrap,
            "enable.idempotence": True,
            "key.serializer": lambda key, _ctx: key.encode(),
            "value.serializer": AvroSerializer(registry, schema),
        }
    )
    rng = random.Random(args.seed)
    counts = {"sent": 0, "valid": 0, "invalid": 0, "duplicates": 0, "late": 0}
    totals = {}  # (customer, minute) -> amount of the valid, on-time events
    sent_ids = []

    def send(event: dict) -> None:
        producer.produce(args.topic, key=str(event["customer_id"]), value=event)
        counts["sent"] += 1
        if counts["sent"] % 1000 == 0:
            producer.poll(0)

    late = []
    for i in range(args.count):
        ts = START_MS + i * SPAN_MS // args.count + rng.randint(0, 2000)
        customer = rng.randint(1, 50)
        event = {
            "event_id": f"evt-{args.seed}-{i}",
            "customer_id": customer,
            "email": f"customer{customer}@example.com",
            "card_number": f"4111 1111 1111 {customer:04d}",
            "amount": round(rng.uniform(1, 500), 2),
            "currency": rng.choice(["EUR", "USD", "GBP"]),
            "ts": ts,
        }
        roll = rng.random()
        if roll < 0.03:
            event["email"] = None
            counts["invalid"] += 1
            send(event)
            continue
        if roll < 0.05:
            event["currency"] = ""
            counts["invalid"] += 1
            send(event)
            continue
        if roll < 0.06 and ts > START_MS + SPAN_MS // 2:
            event["ts"] = ts - 5 * 60 * 1000
            late.append(event)
            continue
        counts["valid"] += 1
        key = (customer, ts // 60_000 * 60_000)
        totals[key] = round(totals.get(key, 0.0) + event["amount"], 6)
        sent_ids.append(event)
        send(event)
        if rng.random() < 0.03:
            counts["duplicates"] += 1
            send(dict(event))
    for event in late:
        counts["valid"] += 1
        counts["late"] += 1
        send(event)
    remaining = producer.flush(60)
    if remaining:
        raise SystemExit(f"{remaining} events not delivered")
    counts["windows"] = len(totals)
    counts["total_amount"] = round(sum(totals.values()), 2)
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
