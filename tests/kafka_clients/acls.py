"""Kafka's ACLs through confluent-kafka over SASL/SCRAM-SHA-512 (driven by
tests/cluster/kafka_acls.rs). A super user manages topics and ACLs through one broker; an
ordinary user, through another broker, is refused until it holds the ACLs it needs, and
refused again once a DENY is added.

  acls.py ADMIN_BOOTSTRAP USER_BOOTSTRAP ADMIN:PASSWORD USER:PASSWORD TOPIC
      prints one JSON line of what happened
"""
import json
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)


def sasl(bootstrap, credentials):
    user, password = credentials.split(":", 1)
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
    }


def produce(producer, topic, values):
    """Produces `values`; returns the first delivery error's name, or None."""
    errors = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(err)

    for v in values:
        producer.produce(topic, v.encode(), callback=delivered)
    left = producer.flush(30)
    if left:
        return "undelivered"
    return errors[0].name() if errors else None


def consume(config, topic, group, want, budget):
    """Reads up to `want` records as group `group`; returns (values, first error name)."""
    c = Consumer(dict(config, **{"group.id": group, "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    got, error = [], None
    deadline = time.time() + budget
    while time.time() < deadline and len(got) < want and error is None:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() != KafkaError._PARTITION_EOF:
                error = m.error().name()
            continue
        got.append(m.value().decode())
    c.close()
    return got, error


def binding(principal, operation, kind, name, pattern, permission=AclPermissionType.ALLOW):
    return AclBinding(kind, name, pattern, principal, "*", operation, permission)


def main():
    admin_at, user_at, admin_cred, user_cred, topic = sys.argv[1:6]
    user = "User:" + user_cred.split(":", 1)[0]
    admin = AdminClient(sasl(admin_at, admin_cred))
    report = {}

    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)

    as_user = sasl(user_at, user_cred)
    producer = Producer(dict(as_user, **{"message.timeout.ms": 10000}))
    report["produce_without_acl"] = produce(producer, topic, ["refused"])

    lit, pre = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    grants = [
        binding(user, AclOperation.WRITE, ResourceType.TOPIC, topic, lit),
        binding(user, AclOperation.READ, ResourceType.TOPIC, topic[:3], pre),
        binding(user, AclOperation.READ, ResourceType.GROUP, "readers", lit),
    ]
    created = admin.create_acls(grants)
    report["created"] = sum(1 for f in created.values() if f.result(30) is None)

    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )
    report["described"] = len(admin.describe_acls(everything).result(30))
    matching = AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.MATCH, None, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )
    report["matching_topic"] = len(admin.describe_acls(matching).result(30))

    # The grants reach the user's broker through the metadata log a moment later (a new
    # producer each time: librdkafka keeps a topic's authorization error for a while).
    values = [f"record-{i}" for i in range(10)]
    deadline = time.time() + 30
    while True:
        producer = Producer(dict(as_user, **{"message.timeout.ms": 10000}))
        report["produce_with_acl"] = produce(producer, topic, values)
        if report["produce_with_acl"] is None or time.time() > deadline:
            break
        time.sleep(0.2)

    got, error = consume(as_user, topic, "readers", len(values), 30)
    report["consumed"], report["consume_error"] = len(set(got)), error
    got, error = consume(as_user, topic, "strangers", 1, 15)
    report["other_group_error"] = error
    # READ on the group is not DELETE: the user may not delete it; the super user may.
    report["user_deletes_group"] = delete_group(AdminClient(as_user), "readers")
    report["admin_deletes_group"] = delete_group(admin, "readers")

    deny = binding(user, AclOperation.READ, ResourceType.TOPIC, topic, lit,
                   AclPermissionType.DENY)
    admin.create_acls([deny])[deny].result(30)
    deadline = time.time() + 30
    while True:
        got, error = consume(as_user, topic, "readers", 1, 10)
        report["consume_after_deny"] = error
        if error is not None or time.time() > deadline:
            break

    mine = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, user, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )
    deleted = admin.delete_acls([mine])[mine].result(30)
    report["deleted"] = len(deleted)
    report["left"] = len(admin.describe_acls(everything).result(30))

    user_admin = AdminClient(as_user)
    try:
        user_admin.create_acls([grants[0]])[grants[0]].result(30)
        report["user_creates_acl"] = None
    except KafkaException as e:
        report["user_creates_acl"] = e.args[0].name()
    listed = user_admin.list_topics(timeout=30).topics
    report["user_lists_topic"] = topic in listed

    # A user created through the admin API logs in on another broker; deleted, it cannot.
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    new_user = UserScramCredentialUpsertion("carol", info, b"carol-secret", b"carol-salt")
    admin.alter_user_scram_credentials([new_user])["carol"].result(30)
    described = admin.describe_user_scram_credentials(["carol"])
    if isinstance(described, dict):
        described = {u: f.result(30) for u, f in described.items()}
    else:
        described = described.result(30)
    report["carol_mechanisms"] = [
        i.mechanism.name for i in described["carol"].scram_credential_infos
    ]
    report["carol_logs_in"] = logs_in(user_at, "carol:carol-secret")
    gone = UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)
    admin.alter_user_scram_credentials([gone])["carol"].result(30)
    report["deleted_carol_logs_in"] = logs_in(user_at, "carol:carol-secret")
    print(json.dumps(report))


def delete_group(client, group):
    """Deletes `group` through `client`; returns the error's name, or None."""
    try:
        client.delete_consumer_groups([group], request_timeout=30)[group].result(30)
        return None
    except KafkaException as e:
        return e.args[0].name()


def logs_in(bootstrap, credentials):
    """Whether a new admin client authenticates (it then lists topics, even none)."""
    errors = []
    config = dict(sasl(bootstrap, credentials), error_cb=lambda e: errors.append(e.name()))
    client = AdminClient(config)
    try:
        client.list_topics(timeout=10)
        return "_AUTHENTICATION" not in errors
    except KafkaException:
        return False


if __name__ == "__main__":
    main()
