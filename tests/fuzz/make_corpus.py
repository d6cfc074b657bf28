#!/usr/bin/python3
"""Writes the seed corpora of the fuzz harnesses into tests/fuzz/corpus/.

Standard library plus python3-lz4 and python3-zstandard (deploy/install-deps.sh).
Seeds come from the Kafka-made batches in tests/broker/testdata (record
batch, segment recovery), small compressed payloads (decompress), a few
schedules (raft) and request bodies as the HTTP API documents them
(http_json), raw HTTP requests (http_requests). Deterministic: running it again writes the same files.

    tests/fuzz/make_corpus.py      (Debian's /usr/bin/python3: its lz4 and zstandard modules)
"""
import json
import os
import struct
import zlib

import lz4.frame
import zstandard

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def put(harness, name, data):
    d = os.path.join(CORPUS, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    vectors = json.load(open(os.path.join(ROOT, "tests/broker/testdata/kafka_record_batch_v2.json")))
    batches = [bytes.fromhex(c["batch_hex"]) for c in vectors["cases"]]
    for i, b in enumerate(batches):
        put("record_batch", f"kafka-{i:02d}", b)
        # a segment of one batch, no index files
        put("segment_recovery", f"one-batch-{i:02d}", bytes([0, 0, 0]) + b)
    # a segment of several batches with consecutive base offsets, plus a
    # torn tail, and an index part of 16 zero bytes
    seg = b""
    base = 0
    for b in batches[:4]:
        last_delta = struct.unpack(">i", b[23:27])[0]
        seg += struct.pack(">q", base) + b[8:]
        base += last_delta + 1
    put("segment_recovery", "four-batches", bytes([0, 0, 0]) + seg)
    put("segment_recovery", "four-batches-torn", bytes([0, 0, 0]) + seg[:-7])
    put("segment_recovery", "with-indexes", bytes([3, 0, 16]) + bytes(16) + seg)
    put("segment_recovery", "two-segments", bytes([4, 0, 0]) + seg + seg)

    payload = b"ferry " * 50 + bytes(range(256))
    put("decompress", "gzip", bytes([0]) + zlib.compress(payload))
    gz = zlib.compressobj(wbits=31)
    put("decompress", "gzip-header", bytes([0]) + gz.compress(payload) + gz.flush())
    put("decompress", "lz4", bytes([1]) + lz4.frame.compress(payload))
    put("decompress", "zstd", bytes([2]) + zstandard.ZstdCompressor().compress(payload))
    put("decompress", "none", bytes([4]) + payload)

    # raft: ticks of member 0 until it campaigns, deliveries, proposals,
    # then a crash of the leader and more of the same
    elect = bytes([0x00] * 12 + [0x0f] * 6 + [0x0a] * 3 + [0x0f] * 6)
    put("raft", "elect-propose", elect)
    put("raft", "elect-crash-reelect", elect + bytes([0x0c]) + bytes([0x11] * 12 + [0x0f] * 8 + [0x1a] * 2 + [0x0f] * 8))
    put("raft", "lossy", bytes([0x00] * 10 + [0x08, 0x0f, 0x09, 0x05, 0x0f, 0x0a, 0x18, 0x0f] * 6))

    bodies = {
        "produce-one": {"key": "k1", "value": "hello", "headers": {"h": "v"}},
        "produce-many": {"records": [{"value": {"n": 1}, "partition": 0},
                                     {"key": "a", "value": "aGVsbG8=", "encoding": "base64"},
                                     {"value": None, "timestamp": 1700000000000}]},
        "topic-spec": {"name": "orders", "partitions": 3, "replicationFactor": 1,
                       "config": {"retention.ms": 86400000, "max.message.bytes": "1048576"}},
        "topic-patch": {"config": {"retention.ms": "1000"}, "partitions": 6},
        "commit": {"offsets": [{"topic": "t", "partition": 0, "offset": 42, "metadata": "m"}]},
        "queue-receive": {"member": "w1", "max": 10, "visibilityMs": 30000, "waitMs": 100},
        "queue-ack": {"member": "w1", "partition": 0, "offset": 7, "leaseId": "123456789012345678",
                      "delayMs": 100, "extendMs": 1000, "error": "boom"},
        "reset": {"topics": ["t"], "to": "timestamp", "value": 1700000000000, "dryRun": True},
    }
    for name, body in bodies.items():
        put("http_json", name, json.dumps(body).encode())

    # http_requests: the bytes of one connection; the first byte picks the
    # gateway (0: auth off, 1: auth on, user fuzz / fuzz-pass).
    basic = "Authorization: Basic ZnV6ejpmdXp6LXBhc3M=\r\n"
    def request(method, target, body=None, headers=""):
        text = f"{method} {target} HTTP/1.1\r\nHost: ferry\r\n{headers}"
        data = b""
        if body is not None:
            data = json.dumps(body).encode()
            text += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        return text.encode() + b"\r\n" + data
    requests = {
        "health": request("GET", "/healthz"),
        "cluster": request("GET", "/v1/cluster"),
        "remove-node": request("DELETE", "/v1/cluster/nodes/4"),
        "topics": request("GET", "/v1/topics"),
        "create-topic": request("POST", "/v1/topics", bodies["topic-spec"]),
        "describe-topic": request("GET", "/v1/topics/t-orders"),
        "alter-topic": request("PATCH", "/v1/topics/t-orders", bodies["topic-patch"]),
        "delete-topic": request("DELETE", "/v1/topics/t%2Dorders"),
        "produce": request("POST", "/v1/topics/t-orders/messages?acks=all&partition=0",
                           bodies["produce-many"]),
        "fetch": request("GET", "/v1/topics/t-orders/partitions/0/messages"
                         "?offset=earliest&limit=10&maxWaitMs=100&maxBytes=65536&encoding=base64"),
        "groups": request("GET", "/v1/groups"),
        "group": request("GET", "/v1/groups/g"),
        "delete-group": request("DELETE", "/v1/groups/g"),
        "commit": request("POST", "/v1/groups/g/offsets", bodies["commit"]),
        "reset": request("POST", "/v1/groups/g/reset", bodies["reset"]),
        "queue-group": request("PUT", "/v1/groups/g/queue",
                               {"topic": "t-orders", "maxAttempts": 4, "dlqTopic": "t-dlq"}),
        "queue-receive": request("POST", "/v1/groups/g/queue/t-orders/receive?encoding=string",
                                 bodies["queue-receive"]),
        "queue-ack": request("POST", "/v1/groups/g/queue/t-orders/ack", bodies["queue-ack"]),
        "queue-nack": request("POST", "/v1/groups/g/queue/nack", bodies["queue-ack"]),
        "dlqs": request("GET", "/v1/dlq"),
        "dlq-show": request("GET", "/v1/dlq/g?limit=5"),
        "dlq-redrive": request("POST", "/v1/dlq/g/redrive", {"topic": "t-orders"}),
        "users": request("GET", "/v1/users"),
        "create-user": request("POST", "/v1/users", {"name": "bob", "password": "pw-12345"}),
        "acls": request("POST", "/v1/acls", {"principal": "bob", "resourceType": "topic",
                                             "resourceName": "t", "patternType": "prefixed",
                                             "operation": "read", "permission": "allow"}),
        "wrong-method": request("PUT", "/v1/topics"),
        "no-such-path": request("GET", "/v2/x?y=%zz"),
        "pipelined": request("GET", "/healthz") + request("GET", "/v1/topics")
                     + request("POST", "/v1/topics/t-a/messages", bodies["produce-one"]),
        "http10": b"GET /v1/topics HTTP/1.0\r\n\r\n",
        "expect-continue": request("POST", "/v1/topics/t-a/messages", bodies["produce-one"],
                                   "Expect: 100-continue\r\n"),
        "chunked": b"POST /v1/topics/t-a/messages HTTP/1.1\r\nHost: ferry\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n5\r\n{\"val\r\n"
                   b"a\r\nue\":\"x\"}\r\n0\r\n\r\n",
        "oversized-length": b"POST /v1/topics HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n{",
    }
    for name, data in requests.items():
        put("http_requests", "open-" + name, b"\x00" + data)
        put("http_requests", "auth-" + name, b"\x01" + data.replace(
            b"Host: ferry\r\n", b"Host: ferry\r\n" + basic.encode()))
    put("http_requests", "auth-token", b"\x01" + request("POST", "/v1/tokens", {"ttlSeconds": 60},
                                                          basic))
    put("http_requests", "auth-bearer", b"\x01" + request(
        "GET", "/v1/topics", None, "Authorization: Bearer ZnV6ejoxOjE.c2ln\r\n"))
    put("http_requests", "auth-wrong-password", b"\x01" + request(
        "GET", "/v1/topics", None, "Authorization: Basic ZnV6ejpub3Bl\r\n"))
    put("http_requests", "auth-none", b"\x01" + request("GET", "/v1/topics/t-denied"))

    # LMDB rows and __consumer_state values (fuzz_lmdb_rows.cpp: the first
    # byte picks the decoder), in the formats of the broker headers.
    def be(n, width):
        return n.to_bytes(width, "big", signed=n < 0)

    def short_str(b):
        return be(len(b), 2) + b

    commit = be(1, 4) + short_str(b"t") + be(0, 4) + be(5, 8) + be(1000, 8) + be(0, 4)
    put("lmdb_rows", "consumer-state-commit", bytes([0, 1]) + commit)
    put("lmdb_rows", "consumer-state-group-delete", bytes([0, 3]))
    put("lmdb_rows", "consumer-state-partition-erase", bytes([0, 6]) + short_str(b"t") + be(2, 4))
    put("lmdb_rows", "consumer-state-dlq-marks-below", bytes([0, 9]) + short_str(b"dlq") + be(0, 4) + be(7, 8))
    put("lmdb_rows", "consumer-state-dlq-topic-erase", bytes([0, 10]) + short_str(b"dlq"))
    put("lmdb_rows", "commit-value", bytes([1, 1]) + commit)
    put("lmdb_rows", "offset-key", bytes([2]) + b"g\x00t\x00" + be(3, 4))
    put("lmdb_rows", "offset-value", bytes([3, 1]) + be(42, 8) + be(1700000000000, 8) + be(2, 4) + b"md")
    put("lmdb_rows", "group-value", bytes([4, 1]) + be(3, 4) + bytes([5]) + b"queue" + bytes([5]) + b"range")
    put("lmdb_rows", "queue-position", bytes([6, 1]) + be(99, 8))
    retry = bytes([1, 1]) + be(2, 4) + be(1000, 8) + be(2000, 8) + be(3000, 8) + be(4, 2) + b"boom"
    put("lmdb_rows", "queue-record-retry", bytes([7]) + retry)
    put("lmdb_rows", "partition-key", bytes([8]) + b"orders\x00" + be(1, 4))
    put("lmdb_rows", "partition-metadata", bytes([9, 1]) + be(0, 8) + be(10, 8) + be(1, 4) + be(0, 4) + be(0, 8))
    put("lmdb_rows", "raft-hard-state", bytes([11, 1]) + be(3, 8) + be(2, 4))
    put("lmdb_rows", "raft-entry", bytes([12, 1]) + be(3, 8) + bytes([0]) + b"cmd")

    # Kafka request frames (fuzz_kafka_requests.cpp): header + body, no size.
    def i16(n):
        return struct.pack(">h", n)

    def i32(n):
        return struct.pack(">i", n)

    def i64(n):
        return struct.pack(">q", n)

    def kstr(b):
        return i16(len(b)) + b

    def header(key, version, flexible=False):
        return i16(key) + i16(version) + i32(1) + kstr(b"fuzz") + (b"\x00" if flexible else b"")

    put("kafka_requests", "api-versions-v0", header(18, 0))
    put("kafka_requests", "api-versions-v3",
        header(18, 3, True) + bytes([11]) + b"librdkafka" + bytes([6]) + b"2.0.2" + b"\x00")
    put("kafka_requests", "metadata-v0-all", header(3, 0) + i32(0))
    put("kafka_requests", "metadata-v8-one",
        header(3, 8) + i32(1) + kstr(b"events") + b"\x01\x00\x00")
    put("kafka_requests", "produce-v8", header(0, 8) + i16(-1) + i16(-1) + i32(30000) + i32(1)
        + kstr(b"events") + i32(1) + i32(0) + i32(len(batches[0])) + batches[0])
    put("kafka_requests", "produce-v3-null-records", header(0, 3) + i16(-1) + i16(1) + i32(0)
        + i32(1) + kstr(b"t") + i32(1) + i32(2) + i32(-1))
    fetch = (i32(-1) + i32(500) + i32(1) + i32(52428800) + b"\x00" + i32(0) + i32(-1) + i32(1)
             + kstr(b"events") + i32(1) + i32(0) + i32(-1) + i64(0) + i64(-1) + i32(1048576)
             + i32(0) + kstr(b""))
    put("kafka_requests", "fetch-v11", header(1, 11) + fetch)
    put("kafka_requests", "fetch-v4", header(1, 4) + i32(-1) + i32(0) + i32(1) + i32(1 << 20)
        + b"\x00" + i32(1) + kstr(b"events") + i32(1) + i32(0) + i64(5) + i32(1 << 20))
    put("kafka_requests", "list-offsets-v5", header(2, 5) + i32(-1) + b"\x00" + i32(1)
        + kstr(b"events") + i32(1) + i32(0) + i32(-1) + i64(-2))
    put("kafka_requests", "init-producer-id-v1", header(22, 1) + i16(-1) + i32(60000))
    put("kafka_requests", "join-group-unsupported", header(11, 6) + b"\x00" * 8)

    def kbytes(b):
        return i32(len(b)) + b

    # Group APIs: a consumer subscription / assignment inside.
    subscription = i16(1) + i32(1) + kstr(b"events") + i32(-1) + i32(1) + kstr(b"events") + i32(1) + i32(0)
    assignment = i16(0) + i32(1) + kstr(b"events") + i32(2) + i32(0) + i32(1) + i32(-1)
    put("kafka_requests", "find-coordinator-v2", header(10, 2) + kstr(b"grp") + b"\x00")
    put("kafka_requests", "join-group-v5", header(11, 5) + kstr(b"grp") + i32(10000) + i32(300000)
        + kstr(b"") + i16(-1) + kstr(b"consumer") + i32(1) + kstr(b"range") + kbytes(subscription))
    put("kafka_requests", "sync-group-v3", header(14, 3) + kstr(b"grp") + i32(1) + kstr(b"m-1")
        + i16(-1) + i32(1) + kstr(b"m-1") + kbytes(assignment))
    put("kafka_requests", "heartbeat-v3", header(12, 3) + kstr(b"grp") + i32(1) + kstr(b"m-1") + i16(-1))
    put("kafka_requests", "leave-group-v3", header(13, 3) + kstr(b"grp") + i32(1) + kstr(b"m-1") + i16(-1))
    put("kafka_requests", "offset-commit-v7", header(8, 7) + kstr(b"grp") + i32(1) + kstr(b"m-1")
        + i16(-1) + i32(1) + kstr(b"events") + i32(1) + i32(0) + i64(5) + i32(-1) + i16(-1))
    put("kafka_requests", "offset-fetch-v5-all", header(9, 5) + kstr(b"grp") + i32(-1))
    put("kafka_requests", "list-groups-v2", header(16, 2))
    put("kafka_requests", "offset-for-leader-epoch-v3", header(23, 3) + i32(-1) + i32(1)
        + kstr(b"events") + i32(1) + i32(0) + i32(2) + i32(1))
    # SASL: a handshake and the tokens of a PLAIN and a SCRAM login.
    put("kafka_requests", "sasl-handshake-v1", header(17, 1) + kstr(b"SCRAM-SHA-256"))
    put("kafka_requests", "sasl-authenticate-v1-plain", header(36, 1) + kbytes(b"\x00alice\x00secret"))
    put("kafka_requests", "sasl-authenticate-v0-scram", header(36, 0)
        + kbytes(b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL"))
    put("kafka_requests", "create-topics-v4", header(19, 4) + i32(1) + kstr(b"new") + i32(3) + i16(1)
        + i32(0) + i32(1) + kstr(b"retention.ms") + kstr(b"60000") + i32(30000) + b"\x00")
    put("kafka_requests", "delete-topics-v3", header(20, 3) + i32(1) + kstr(b"new") + i32(30000))
    put("kafka_requests", "create-partitions-v1", header(37, 1) + i32(1) + kstr(b"new") + i32(6)
        + i32(-1) + i32(30000) + b"\x00")
    put("kafka_requests", "describe-configs-v2", header(32, 2) + i32(1) + b"\x02" + kstr(b"new")
        + i32(-1) + b"\x00")
    put("kafka_requests", "alter-configs-v1", header(33, 1) + i32(1) + b"\x02" + kstr(b"new")
        + i32(1) + kstr(b"retention.ms") + kstr(b"1000") + b"\x00")
    put("kafka_requests", "delete-records-v1", header(21, 1) + i32(1) + kstr(b"new") + i32(1)
        + i32(0) + i64(-1) + i32(30000))
    put("kafka_requests", "describe-groups-v4", header(15, 4) + i32(1) + kstr(b"grp") + b"\x00")


if __name__ == "__main__":
    main()
