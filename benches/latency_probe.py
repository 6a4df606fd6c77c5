"""Paced input and a read_committed latency reader for the scale-out
benchmarks (benches/scale-out.sh): each record carries its send time
(`sent_ms`), and the reader measures send -> visible per record."""
import json
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition

BOOTSTRAP = "127.0.0.1:9092"


class Probe:
    """Produces `rate` records/s into `topic_in` (8 partitions, record i
    to partition i % 8, its fields from `fields(i)` plus `sent_ms` and
    `ts`) and reads `topic_out` read_committed, keeping
    (received at, value, latency ms) per record in `seen`."""

    def __init__(self, topic_in, topic_out, fields, rate=4000, partitions=8):
        self.topic_in, self.topic_out = topic_in, topic_out
        self.fields, self.rate, self.partitions = fields, rate, partitions
        self.stopped = False
        self.seen = []
        self.threads = [threading.Thread(target=self._produce), threading.Thread(target=self._consume)]

    def start(self):
        for thread in self.threads:
            thread.start()
        return self

    def stop(self):
        self.stopped = True
        for thread in self.threads:
            thread.join()

    def _produce(self):
        producer = Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 5})
        i, start = 0, time.time()
        while not self.stopped:
            for _ in range(40):
                now_ms = int(time.time() * 1000)
                value = {**self.fields(i), "sent_ms": now_ms, "ts": now_ms}
                producer.produce(self.topic_in, json.dumps(value).encode(), partition=i % self.partitions)
                i += 1
            producer.poll(0)
            time.sleep(max(0.0, start + i / self.rate - time.time()))
        producer.flush()

    def _consume(self):
        consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": f"latency-reader-{time.time()}",
                             "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition(self.topic_out, p, 0) for p in range(self.partitions)])
        while not self.stopped:
            message = consumer.poll(0.1)
            if message is None or message.error():
                continue
            now = time.time()
            value = json.loads(message.value())
            self.seen.append((now, value, now * 1000 - value["sent_ms"]))
        consumer.close()


def percentile(values, q):
    """The q-quantile of `values` (nan when empty)."""
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")
