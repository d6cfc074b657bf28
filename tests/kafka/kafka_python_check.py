#!/usr/bin/python3
"""kafka-python (Debian's python3-kafka 2.0.2) against a Ferry Kafka listener.

Usage: kafka_python_check.py HOST:PORT TOPIC N

Produces N keyed records with acks=all (each future waited for), then reads
the topic from the earliest offsets with assigned partitions (no group) and
checks that every produced (key, value) came back exactly once at the offset
its ack named. Prints "acked N" and "consumed N"; exits 1 on any mismatch.
Run by tests/kafka/kafka_listener_test.cpp.
"""

import sys

from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def main():
    bootstrap, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all",
                             request_timeout_ms=30000, linger_ms=5)
    futures = [producer.send(topic, key=b"py%d" % i, value=b"value-%d" % i)
               for i in range(n)]
    acked = {}
    for i, f in enumerate(futures):
        md = f.get(timeout=60)
        acked[(md.partition, md.offset)] = (b"py%d" % i, b"value-%d" % i)
    producer.close()
    print("acked", len(acked), flush=True)
    if len(acked) != n:
        print("two records acked at one offset", file=sys.stderr)
        return 1

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000)
    partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    seen = {}
    for m in consumer:
        if (m.partition, m.offset) in seen:
            print("offset read twice:", m.partition, m.offset, file=sys.stderr)
            return 1
        seen[(m.partition, m.offset)] = (m.key, m.value)
        if len(seen) >= n:
            break
    consumer.close()
    print("consumed", len(seen), flush=True)
    bad = [(k, v, seen.get(k)) for k, v in acked.items() if seen.get(k) != v]
    if bad:
        print("acked records not read back at their offsets:", bad[:5], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
