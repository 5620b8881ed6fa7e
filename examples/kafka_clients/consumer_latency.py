"""A kafka-python consumer assigned every partition of a topic, for kafka_targets' part 4.

Prints "ready" once it is assigned and positioned at each partition's end, then reads until it
has `total` records; each record's value is the time (ms since the epoch, as a decimal string)
at which it was sent. Prints one JSON line: per partition, the produce-to-consume times in ms.

Usage: consumer_latency.py BOOTSTRAP TOPIC PARTITIONS TOTAL
"""
import json
import sys
import time

from kafka import KafkaConsumer, TopicPartition


def main():
    bootstrap, topic, partitions, total = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    assigned = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(assigned)
    consumer.seek_to_end()
    for tp in assigned:
        consumer.position(tp)
    print("ready", flush=True)
    latencies = {p: [] for p in range(partitions)}
    seen = 0
    deadline = time.time() + 120
    while seen < total and time.time() < deadline:
        for tp, records in consumer.poll(timeout_ms=1000).items():
            now_ms = time.time() * 1000.0
            for r in records:
                latencies[tp.partition].append(now_ms - float(r.value.decode()))
                seen += 1
    consumer.close()
    print(json.dumps(latencies), flush=True)


if __name__ == "__main__":
    main()
