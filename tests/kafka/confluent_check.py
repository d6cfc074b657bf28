#!/usr/bin/python3
"""python3-confluent-kafka (librdkafka) against a Ferry Kafka listener.

Usage:
  confluent_check.py produce HOST:PORT TOPIC N PACE_MS
      An idempotent producer (enable.idempotence=true, acks=all) writes
      values v1..vN, one every PACE_MS ms, and waits (up to 150 s) until each
      is delivered. Prints "acked K" every 50 deliveries and at the end
      "delivered D failed F"; exits 0 only if all N were delivered.
  confluent_check.py member HOST:PORT TOPIC GROUP SECONDS
      A cooperative-sticky group member for SECONDS seconds. Prints
      "assigned P,..." and "revoked P,..." as the rebalance callbacks say
      (the partitions of that callback only), "record P VALUE" per record,
      and commits before it leaves.

Run by tests/kafka/kafka_listener_test.cpp.
"""

import sys
import time

from confluent_kafka import Consumer, Producer


def produce(bootstrap, topic, n, pace_ms):
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "message.timeout.ms": 150000, "linger.ms": 2,
                  "reconnect.backoff.max.ms": 500})
    state = {"ok": 0, "failed": 0}

    def report(err, msg):
        if err is not None:
            state["failed"] += 1
            print("error", err, flush=True)
            return
        state["ok"] += 1
        if state["ok"] % 50 == 0:
            print("acked", state["ok"], flush=True)

    for i in range(1, n + 1):
        while True:
            try:
                p.produce(topic, value=b"v%d" % i, on_delivery=report)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
        time.sleep(pace_ms / 1000.0)
    left = p.flush(150)
    print("delivered", state["ok"], "failed", state["failed"], "unsent", left, flush=True)
    return 0 if state["ok"] == n else 1


def member(bootstrap, topic, group, seconds):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "partition.assignment.strategy": "cooperative-sticky",
                  "auto.offset.reset": "earliest", "enable.auto.commit": True,
                  "auto.commit.interval.ms": 500, "session.timeout.ms": 10000,
                  "heartbeat.interval.ms": 500})

    def names(parts):
        return ",".join(str(p.partition) for p in sorted(parts, key=lambda p: p.partition))

    def on_assign(consumer, parts):
        print("assigned", names(parts), flush=True)
        consumer.incremental_assign(parts)

    def on_revoke(consumer, parts):
        print("revoked", names(parts), flush=True)
        consumer.incremental_unassign(parts)

    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        print("record", m.partition(), m.value().decode(), flush=True)
    c.close()
    print("closed", flush=True)
    return 0


def main():
    mode = sys.argv[1]
    if mode == "produce":
        return produce(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    if mode == "member":
        return member(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
    print("unknown mode", mode, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
