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
      "group GROUP STATE PROTOCOL_TYPE" for GROUP; then creates and deletes
      a topic named TOPIC (see the test for which of these Ferry answers).

Run by tests/kafka/kafka_listener_test.cpp.
"""

import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer


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


def admin(bootstrap, topic, group):
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    groups = client.list_consumer_groups()
    print("listed", " ".join(sorted(g for g, _ in groups)), flush=True)
    for d in client.describe_consumer_groups([group]):
        print("group", d.group, d.state, d.protocol_type or "-", flush=True)
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
