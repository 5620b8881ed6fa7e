"""Partition moves and preferred-leader elections through the admin clients of kafka-python
and confluent-kafka (driven by tests/cluster/kafka_leaders.rs): kafka-python moves a
partition's preferred replica to the end of its list and back to the front of another's
(AlterPartitionReassignments), sees a move to a broker the cluster lacks refused and no move
left listed (ListPartitionReassignments); confluent-kafka then elects the preferred leaders
(ElectLeaders) through another broker, and kafka-python finds no election needed.

  leaders.py BOOTSTRAP_A BOOTSTRAP_B
      prints one JSON line of what each client saw
"""
import json
import sys
import time

from confluent_kafka import ElectionType, KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition

TOPIC = "elected"


def until(fetch, ok, budget=30):
    """Calls `fetch` until its result satisfies `ok`, at most `budget` seconds; returns the
    last result."""
    deadline = time.time() + budget
    while True:
        result = fetch()
        if ok(result) or time.time() > deadline:
            return result
        time.sleep(0.1)


def main():
    a, b = sys.argv[1], sys.argv[2]
    seen = {}
    confluent = AdminClient({"bootstrap.servers": b, "allow.auto.create.topics": False})
    created = confluent.create_topics(
        [NewTopic(TOPIC, 2, replica_assignment=[[1, 2, 3], [2, 3, 1]])]
    )
    created[TOPIC].result(30)

    def partitions():
        md = confluent.list_topics(TOPIC, timeout=10).topics[TOPIC]
        return {
            p: (m.leader, list(m.replicas)) for p, m in sorted(md.partitions.items())
        }

    led = until(partitions, lambda ps: len(ps) == 2 and all(l >= 0 for l, _ in ps.values()))
    seen["before"] = {str(p): v for p, v in led.items()}

    kp = KafkaAdminClient(bootstrap_servers=a, request_timeout_ms=30000)
    # Broker 3 first for partition 0, broker 1 for partition 1: the same brokers in another
    # order, so the leaders stay where they are until elected.
    moved = kp.alter_partition_reassignments(
        {TopicPartition(TOPIC, 0): [3, 2, 1], TopicPartition(TOPIC, 1): [1, 2, 3]}
    )
    seen["altered"] = {
        str(tp.partition): (None if e is None else e.__name__) for tp, e in moved.items()
    }
    refused = kp.alter_partition_reassignments({TopicPartition(TOPIC, 1): [9]})
    seen["unknown_broker"] = {
        str(tp.partition): (None if e is None else e.__name__) for tp, e in refused.items()
    }
    after = until(
        partitions, lambda ps: ps.get(0, (0, []))[1] == [3, 2, 1] and ps.get(1, (0, []))[1] == [1, 2, 3]
    )
    seen["replicas"] = {str(p): r for p, (_, r) in after.items()}
    listed = until(kp.list_partition_reassignments, lambda moving: not moving)
    seen["listed"] = {f"{tp.topic}-{tp.partition}": v for tp, v in listed.items()}
    seen["leaders_before_election"] = {str(p): l for p, (l, _) in after.items()}

    # confluent-kafka elects the preferred leaders (its request goes to the broker Metadata
    # names as the controller).
    outcome = confluent.elect_leaders(
        ElectionType.PREFERRED,
        [CkTopicPartition(TOPIC, 0), CkTopicPartition(TOPIC, 1)],
    ).result(30)
    seen["confluent"] = {
        str(tp.partition): (None if e is None else e.args[0].name())
        for tp, e in sorted(outcome.items(), key=lambda kv: kv[0].partition)
    }
    elected = until(partitions, lambda ps: ps[0][0] == 3 and ps[1][0] == 1)
    seen["leaders"] = {str(p): l for p, (l, _) in elected.items()}

    # kafka-python asks again, for the topic's partitions: nothing left to do.
    answer = kp.elect_leaders(0, {TOPIC: [0, 1]}, raise_errors=False)
    seen["kafka_python"] = sorted(
        (p[0], p[1])
        for t in answer.replica_election_results
        for p in t[1]
    )
    kp.close()
    print(json.dumps(seen))


if __name__ == "__main__":
    try:
        main()
    except KafkaException as e:
        print(json.dumps({"error": str(e)}))
        sys.exit(1)
