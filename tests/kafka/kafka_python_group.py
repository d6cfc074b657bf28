#!/usr/bin/python3
"""kafka-python (Debian's python3-kafka 2.0.2) groups and admin against Ferry.

Usage:
  kafka_python_group.py consume HOST:PORT TOPIC GROUP N
      Joins GROUP (subscribe, no auto commit), reads until N records came
      (60 s at most), commits what it read, leaves. Prints
      "consumed N" and one line "record KEY VALUE" per record; exits 1 if
      fewer than N came.
  kafka_python_group.py admin HOST:PORT TOPIC GROUP
      KafkaAdminClient: lists and describes the consumer groups and prints
      "group GROUP STATE PROTOCOL_TYPE" for GROUP; then creates a topic
      named TOPIC with retention.ms=3600000, creates it again (expecting
      TopicAlreadyExists), describes and alters its retention.ms, grows it
      to 4 partitions and deletes it, printing a line for each step.

Run by tests/kafka/kafka_listener_test.cpp.
"""

import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
from kafka.errors import TopicAlreadyExistsError


def consume(bootstrap, topic, group, n):
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=10000, heartbeat_interval_ms=1000)
    got = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        batch = consumer.poll(timeout_ms=500)
        for records in batch.values():
            got.extend(records)
    if got:
        consumer.commit()
    consumer.close()
    print("consumed", len(got), flush=True)
    for m in got:
        print("record", m.key.decode(), m.value.decode(), flush=True)
    return 0 if len(got) >= n else 1


def topic_config(client, topic, key):
    for r in client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)]):
        for res in r.resources:
            if res[0] != 0:
                return "error-%d" % res[0]
            for entry in res[4]:
                if entry[0] == key:
                    return entry[1]
    return None


def admin(bootstrap, topic, group):
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    groups = client.list_consumer_groups()
    print("listed", " ".join(sorted(g for g, _ in groups)), flush=True)
    for d in client.describe_consumer_groups([group]):
        print("group", d.group, d.state, d.protocol_type or "-", flush=True)
    # Topics: create (with a config), describe and alter its config, grow it,
    # refuse a second create, delete.
    client.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1,
                                   topic_configs={"retention.ms": "3600000"})])
    print("created", topic, flush=True)
    try:
        client.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
        print("created twice", flush=True)
    except TopicAlreadyExistsError:
        print("exists", topic, flush=True)
    print("retention.ms", topic_config(client, topic, "retention.ms"), flush=True)
    client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                         configs={"retention.ms": "7200000"})])
    print("altered retention.ms", topic_config(client, topic, "retention.ms"), flush=True)
    client.create_partitions({topic: NewPartitions(4)})
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    print("partitions", len(consumer.partitions_for_topic(topic) or []), flush=True)
    client.delete_topics([topic])
    print("deleted", topic, flush=True)
    consumer.close()
    client.close()
    return 0


def main():
    mode = sys.argv[1]
    if mode == "consume":
        return consume(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    if mode == "admin":
        return admin(sys.argv[2], sys.argv[3], sys.argv[4])
    print("unknown mode", mode, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
