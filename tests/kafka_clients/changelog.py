"""A stateful quixstreams application against replog (driven by tests/cluster/kafka_changelog.rs):
it counts records per key in a state store backed by a compacted changelog topic, which
quixstreams creates itself (`cleanup.policy=compact`); it is stopped, its local state is
deleted, and a second run recovers the counts from the changelog before it counts on from
where its consumer group committed.

  changelog.py BOOTSTRAP STATE_DIR
      prints one JSON line: for each run the records it processed, what its state held for
      each key when it first met it, and the counts it ended with; and the changelog topic's
      cleanup.policy as the admin client describes it
"""
import json
import shutil
import sys
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource
from quixstreams import Application

KEYS = [f"key-{k}" for k in range(5)]
INPUT = "changelog.input"
GROUP = "changelog-counter"


def produce(bootstrap, rounds):
    """`rounds` records for each key, in order."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for _ in range(rounds):
        for key in KEYS:
            producer.produce(INPUT, b"1", key=key.encode())
    producer.flush(30)


def run(bootstrap, state_dir, records):
    """Runs the counting application until it has processed `records` records (or 60 s
    without one) and returns each key's count as it left its state."""
    app = Application(
        broker_address=bootstrap,
        consumer_group=GROUP,
        auto_offset_reset="earliest",
        state_dir=state_dir,
        commit_interval=0.5,
        loglevel="WARNING",
    )
    topic = app.topic(INPUT, key_deserializer="str", value_deserializer="bytes")
    counts, found, processed = {}, {}, [0]

    def count(value, key, _timestamp, _headers, state):
        before = state.get("count", 0)
        # What the state held for the key when this run first met it.
        found.setdefault(key, before)
        state.set("count", before + 1)
        counts[key] = before + 1
        processed[0] += 1
        return before + 1

    sdf = app.dataframe(topic)
    sdf = sdf.apply(count, stateful=True, metadata=True)
    app.run(count=records, timeout=60)
    return {"counts": counts, "found": found, "processed": processed[0]}, app


def main():
    bootstrap, state_dir = sys.argv[1], sys.argv[2]
    out = {}
    produce(bootstrap, 3)
    first, app = run(bootstrap, state_dir, 3 * len(KEYS))
    out["first"] = first
    changelogs = [t for t in app._topic_manager.changelog_topics_list]  # noqa: SLF001
    out["changelog"] = [t.name for t in changelogs]
    admin = AdminClient({"bootstrap.servers": bootstrap, "allow.auto.create.topics": False})
    configs = {}
    for t in changelogs:
        r = ConfigResource(ConfigResource.Type.TOPIC, t.name)
        described = admin.describe_configs([r])[r].result(30)
        configs[t.name] = described["cleanup.policy"].value
    out["policies"] = configs
    # The local state is lost (a new machine): the next run rebuilds it from the changelog.
    shutil.rmtree(state_dir, ignore_errors=True)
    time.sleep(0.1)
    produce(bootstrap, 2)
    second, _ = run(bootstrap, state_dir, 2 * len(KEYS))
    out["second"] = second
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
