"""Confluent's own Python client as an independent producer and reader of
registry-framed Avro (magic byte, schema id, Avro body) for the tests.

    confluent_avro.py produce BOOTSTRAP REGISTRY_URL TOPIC SCHEMA_FILE < values.jsonl
        Registers SCHEMA_FILE under TOPIC-value (as the serializer does by
        default) and produces each JSON line as one record; prints
        {"produced": N, "schema_id": ID}.

    confluent_avro.py consume BOOTSTRAP REGISTRY_URL TOPIC COUNT [TIMEOUT_S]
        Reads COUNT records from the start of every partition of TOPIC
        (read_committed) and prints each value, decoded with the writer
        schema the registry holds for its id, as a JSON line.
"""

import json
import struct
import sys
import time
import uuid

from confluent_kafka import Consumer, SerializingProducer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext


def produce(bootstrap: str, registry_url: str, topic: str, schema_file: str) -> None:
    registry = SchemaRegistryClient({"url": registry_url})
    with open(schema_file, encoding="utf-8") as f:
        schema = f.read()
    serializer = AvroSerializer(registry, schema, conf={"auto.register.schemas": True})
    producer = SerializingProducer(
        {
            "bootstrap.servers": bootstrap,
            "value.serializer": serializer,
            "enable.idempotence": True,
        }
    )
    produced = 0
    schema_id = None
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        producer.produce(topic, value=json.loads(line))
        produced += 1
        if produced % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    if remaining:
        raise SystemExit(f"{remaining} records not delivered")
    # The id the serializer framed the values with.
    latest = registry.get_latest_version(f"{topic}-value")
    schema_id = latest.schema_id
    json.dump({"produced": produced, "schema_id": schema_id}, sys.stdout)


def consume(bootstrap: str, registry_url: str, topic: str, count: int, timeout_s: float) -> None:
    registry = SchemaRegistryClient({"url": registry_url})
    deserializer = AvroDeserializer(registry)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"confluent-avro-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + timeout_s
    read = 0
    while read < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            raise SystemExit(f"consumer error: {message.error()}")
        value = message.value()
        (schema_id,) = struct.unpack(">I", value[1:5])
        decoded = deserializer(value, SerializationContext(topic, MessageField.VALUE))
        print(json.dumps({"schema_id": schema_id, "value": decoded}, default=str))
        read += 1
    consumer.close()
    if read < count:
        raise SystemExit(f"read {read} of {count} records from {topic} in {timeout_s} s")


def main() -> None:
    command = sys.argv[1]
    if command == "produce":
        produce(*sys.argv[2:6])
    elif command == "consume":
        timeout = float(sys.argv[6]) if len(sys.argv) > 6 else 60.0
        consume(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), timeout)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
