"""Reads a compacted topic from its beginning with kafka-python's consumer (driven by
tests/cluster/compaction.rs): the batches a compacted log serves have gaps in their offsets,
and some hold no record at all, which the consumer must step over to reach the end.

  compacted.py BOOTSTRAP TOPIC
      prints one JSON object: each key's last value as read, the records read, and the
      offset the consumer reached
"""
import json
import sys
import time

from kafka import KafkaConsumer, TopicPartition


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    end = consumer.end_offsets([tp])[tp]
    latest = {}
    records = 0
    deadline = time.time() + 60
    # Bounded by the deadline: each poll waits at most a second.
    while consumer.position(tp) < end and time.time() < deadline:
        for batch in consumer.poll(timeout_ms=1000).values():
            for r in batch:
                records += 1
                key = r.key.decode()
                if r.value is None:
                    latest.pop(key, None)
                else:
                    latest[key] = r.value.decode()
    print(json.dumps({"latest": latest, "records": records, "position": consumer.position(tp),
                      "end": end}))
    consumer.close()


if __name__ == "__main__":
    main()
