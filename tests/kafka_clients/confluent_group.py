"""Two confluent-kafka consumers of one group over a topic (driven by tests/cluster/kafka.rs):
both get partitions; one closes (leaving the group); the other takes over every partition from
the committed offsets and reads the rest. Commits after processing each record.

  confluent_group.py BOOTSTRAP TOPIC GROUP TOTAL   prints one JSON line of what happened
"""
import json
import sys
import time

from confluent_kafka import Consumer


def consumer(bootstrap, group):
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )


def main():
    bootstrap, topic, group, total = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    a, b = consumer(bootstrap, group), consumer(bootstrap, group)
    a.subscribe([topic])
    b.subscribe([topic])
    seen = {"a": [], "b": []}

    def take(name, c, budget):
        m = c.poll(budget)
        if m is None or m.error():
            return
        seen[name].append(m.value().decode())
        c.commit(message=m, asynchronous=False)

    # Generous: every record is committed synchronously, and a loaded machine runs the
    # other cluster tests beside this one.
    deadline = time.time() + 150
    # Both members get partitions, and each reads some records.
    while time.time() < deadline and not (
        a.assignment() and b.assignment() and len(seen["a"]) + len(seen["b"]) >= total // 4
    ):
        take("a", a, 0.1)
        take("b", b, 0.1)
    both = bool(a.assignment()) and bool(b.assignment())
    split = (len(a.assignment()), len(b.assignment()))
    b.close()
    # The other takes every partition over and reads what is left.
    while time.time() < deadline and len(set(seen["a"]) | set(seen["b"])) < total:
        take("a", a, 0.2)
    takeover = len(a.assignment())
    a.close()
    everything = set(seen["a"]) | set(seen["b"])
    print(
        json.dumps(
            {
                "both_assigned": both,
                "split": split,
                "takeover_partitions": takeover,
                "distinct": len(everything),
                "read": len(seen["a"]) + len(seen["b"]),
            }
        )
    )


if __name__ == "__main__":
    main()
