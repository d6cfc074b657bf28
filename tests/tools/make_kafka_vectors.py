#!/usr/bin/python3
"""Writes tests/broker/testdata/kafka_record_batch_v2.json: Kafka RecordBatch v2
batches made by an independent implementation, kafka-python (Debian's
python3-kafka, 2.0.2), each with the fields and records that went into it.

    /usr/bin/python3 tests/tools/make_kafka_vectors.py           # rewrite the file
    /usr/bin/python3 tests/tools/make_kafka_vectors.py --check   # exit 1 if it is stale

Deterministic: the records come from a fixed-seed generator of its own (not
Python's `random`, whose algorithms may change between versions), timestamps
are fixed, and gzip's header time is pinned to 0 (what Java's
GZIPOutputStream writes), so a re-run on the same Debian packages reproduces
the committed file byte for byte. The compressed bytes depend on the zlib,
lz4 and zstd builds; the file's "made_with" records the versions used.

Every batch is checked before it is written: kafka-python reads it back (CRC,
records), its attributes carry the codec the case claims and its records
section starts with that codec's frame magic. kafka-python silently sends a
batch uncompressed when compression does not make it smaller (that is how an
earlier file's "zstd" case came out plain), and raises only when a codec module
is missing; both stop this script with a message.

Use /usr/bin/python3: the modules are Debian packages (python3-kafka,
python3-lz4, python3-zstandard; deploy/install-deps.sh installs them), which
another python3 on PATH (pyenv, a venv) does not see.
"""

import argparse
import functools
import gzip
import json
import os
import struct
import sys
import zlib

MISSING = []
try:
    import kafka
    import kafka.codec
    from kafka.record.default_records import (
        DefaultRecordBatch,
        DefaultRecordBatchBuilder,
    )
except ImportError:
    MISSING.append("python3-kafka")
try:
    import lz4
    import lz4.frame
except ImportError:
    MISSING.append("python3-lz4")
try:
    import zstandard
except ImportError:
    MISSING.append("python3-zstandard")

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "broker", "testdata",
                           "kafka_record_batch_v2.json")

SEED = 0x46455252592D4B56  # "FERRY-KV"
BASE_TS = 1764400000000  # 2025-11-29T07:06:40Z, in ms
GZIP_MTIME = 0
HEADER_SIZE = 61

# Codec ids (batch attributes bits 0-2) and the magic that starts each
# codec's stream. Snappy is left out: Ferry does not support it
# (broker/compression.hpp).
CODECS = {
    "none": (0, b""),
    "gzip": (1, b"\x1f\x8b"),
    "lz4": (3, b"\x04\x22\x4d\x18"),
    "zstd": (4, b"\x28\xb5\x2f\xfd"),
}

NOTE = ("uncompressed: an encoder given these fields must produce exactly "
        "these bytes; compressed: a decoder must return exactly these records")


def die(msg):
    sys.exit("make_kafka_vectors: " + msg)


class Rng:
    """splitmix64: tiny, fully specified, the same on every Python."""

    def __init__(self, seed):
        self.state = seed & 0xFFFFFFFFFFFFFFFF

    def next64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> 31)

    def below(self, n):
        return self.next64() % n

    def between(self, lo, hi):  # inclusive
        return lo + self.below(hi - lo + 1)

    def chance(self, percent):
        return self.below(100) < percent

    def pick(self, items):
        return items[self.below(len(items))]

    def bytes(self, n):
        out = bytearray()
        while len(out) < n:
            out += self.next64().to_bytes(8, "little")
        return bytes(out[:n])


WORDS = ("order created paid shipped cancelled refund customer warehouse "
         "berlin lisbon osaka quito parcel express standard priority sku "
         "quantity price currency eur usd jpy note gift wrap fragile").split()


def text_value(rng, approx):
    """A JSON-like event of about `approx` bytes: compressible, as real
    payloads are."""
    note = []
    size = 0
    while size < approx:
        w = rng.pick(WORDS)
        note.append(w)
        size += len(w) + 1
    return ('{"event":"%s","order":%d,"sku":"SKU-%05d","qty":%d,"note":"%s"}' % (
        rng.pick(WORDS), rng.between(1, 999999), rng.below(500),
        rng.between(1, 9), " ".join(note))).encode()


def rec(offset_delta, timestamp, key, value, headers=()):
    return {"offset_delta": offset_delta, "timestamp": timestamp, "key": key,
            "value": value, "headers": list(headers)}


# -- the cases --------------------------------------------------------------
# Each function returns the records; the case table below adds the batch
# fields. Every case draws from its own generator so that editing one leaves
# the others' bytes alone.

def single_record(rng):
    return [rec(0, BASE_TS, b"key-9", rng.bytes(300))]


def null_key_null_or_empty_values(rng):
    return [
        rec(0, BASE_TS + 1, None, rng.bytes(40)),
        rec(1, BASE_TS + 2, b"k1", None),
        rec(2, BASE_TS + 3, None, None),
        rec(3, BASE_TS + 5, b"k3", b""),
        rec(4, BASE_TS + 8, None, b""),
    ]


def empty_key(rng):
    return [rec(i, BASE_TS + 10 + i, b"", rng.bytes(rng.between(1, 20)))
            for i in range(3)]


def headers(rng):
    return [
        rec(0, BASE_TS, b"h0", b"no headers"),
        rec(1, BASE_TS + 1, b"h1", rng.bytes(30), [("trace-id", rng.bytes(16))]),
        rec(2, BASE_TS + 2, None, b"several", [
            ("content-type", b"application/json"),
            ("null-value", None),
            ("empty-value", b""),
            ("", b"empty key"),
            ("dup", b"first"),
            ("dup", b"second"),
            ("gr\u00fc\u00dfe-\u65e5\u672c", b"utf-8 key"),
        ]),
        rec(3, BASE_TS + 3, b"h3", None, [("binary", rng.bytes(200))]),
    ]


def idempotent(rng):
    return [rec(i, BASE_TS + 4 * i, b"p-%d" % i, rng.bytes(rng.between(0, 60)))
            for i in range(6)]


def transactional(rng):
    return [rec(i, BASE_TS + 100 * i, b"tx-%d" % i, text_value(rng, 40),
                [("txn", b"t-77")]) for i in range(4)]


def many_records(rng):
    # 200 records: offset deltas past 63 need two varint bytes.
    out = []
    for i in range(200):
        key = None if rng.chance(10) else b"k-%d" % rng.below(50)
        value = rng.bytes(rng.between(0, 24))
        out.append(rec(i, BASE_TS + i, key, value))
    return out


def timestamps(rng):
    # Out of order and far apart: negative deltas, a delta beyond int32 (40
    # days), the largest timestamp in the middle, timestamp 0.
    ts = [BASE_TS, BASE_TS - 1, BASE_TS - 86400000, BASE_TS + 40 * 86400000,
          BASE_TS + 7, 0]
    return [rec(i, t, b"t-%d" % i, rng.bytes(8)) for i, t in enumerate(ts)]


def offset_gaps(rng):
    # As a compacted log holds them: offset deltas with gaps.
    deltas = [0, 1, 5, 6, 64, 1000, 70000]
    return [rec(d, BASE_TS + i, b"g-%d" % d, rng.bytes(10))
            for i, d in enumerate(deltas)]


def large_record(rng):
    # 8 KiB value: record and value lengths take three varint bytes (zigzag
    # 16384 and up), the 300-byte key and header value two.
    return [rec(0, BASE_TS, rng.bytes(300), rng.bytes(8 * 1024),
                [("big-header", rng.bytes(300))])]


def compressed_mix(rng):
    # 20 records of every kind: keys, null keys, null and empty values,
    # headers.
    out = []
    for i in range(20):
        key = None if i % 5 == 1 else b"user-%d" % rng.below(1000)
        if i % 7 == 3:
            value = None
        elif i % 9 == 4:
            value = b""
        else:
            value = text_value(rng, rng.between(20, 200))
        hs = []
        if i % 3 == 0:
            hs.append(("source", rng.pick(WORDS).encode()))
        if i % 4 == 2:
            hs.append(("null-value", None))
        out.append(rec(i, BASE_TS + 3 * i, key, value, hs))
    return out


def compressed_txn(rng):
    return [rec(i, BASE_TS + 50 * i, b"acct-%d" % rng.below(20),
                text_value(rng, 80), [("txn", b"t-9"), ("step", b"%d" % i)])
            for i in range(8)]


def large_compressible(rng):
    # More than 64 KiB of records: lz4 writes a frame of two 64 KiB blocks.
    # Lines drawn from a few: log-like, and small once compressed.
    lines = [text_value(rng, 60) + b"\n" for _ in range(16)]
    value = bytearray()
    while len(value) < 64 * 1024:
        value += rng.pick(lines)
    return [rec(0, BASE_TS, b"big", bytes(value[:64 * 1024]))]


PLAIN = dict(transactional=False, producer_id=-1, producer_epoch=-1,
             base_sequence=-1)
IDEMPOTENT = dict(transactional=False, producer_id=4242, producer_epoch=3,
                  base_sequence=100)
TXN = dict(transactional=True, producer_id=123456789012, producer_epoch=7,
           base_sequence=5000)

# (name, codec, producer fields, records)
CASES = [
    ("single record, key and value", "none", PLAIN, single_record),
    ("null key, null or empty values", "none", PLAIN,
     null_key_null_or_empty_values),
    ("empty key", "none", PLAIN, empty_key),
    ("headers", "none", PLAIN, headers),
    ("idempotent producer fields", "none", IDEMPOTENT, idempotent),
    ("transactional producer", "none", TXN, transactional),
    ("many records", "none", PLAIN, many_records),
    ("timestamps out of order and far apart", "none", PLAIN, timestamps),
    ("offset deltas with gaps", "none", PLAIN, offset_gaps),
    ("one record of 8 KiB", "none", PLAIN, large_record),
] + [
    (codec, codec, PLAIN, compressed_mix) for codec in ("gzip", "lz4", "zstd")
] + [
    (codec + ", transactional producer", codec, TXN, compressed_txn)
    for codec in ("gzip", "lz4", "zstd")
] + [
    ("lz4, one record of 64 KiB (two lz4 blocks)", "lz4", PLAIN,
     large_compressible),
]


# -- building and checking --------------------------------------------------

class _PinnedGzip:
    """kafka.codec's `gzip`, with the header time pinned (gzip otherwise
    writes the current time into every stream)."""
    GzipFile = functools.partial(gzip.GzipFile, mtime=GZIP_MTIME)

    def __getattr__(self, name):
        return getattr(gzip, name)


def build(codec, fields, records):
    codec_id, magic = CODECS[codec]
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec_id,
        is_transactional=fields["transactional"],
        producer_id=fields["producer_id"],
        producer_epoch=fields["producer_epoch"],
        base_sequence=fields["base_sequence"],
        batch_size=16 << 20)
    for r in records:
        meta = builder.append(r["offset_delta"], timestamp=r["timestamp"],
                              key=r["key"], value=r["value"],
                              headers=r["headers"])
        if meta is None:
            die("a record did not fit the batch")
    return bytes(builder.build())


def check(name, codec, fields, records, batch):
    def fail(msg):
        die("case %r: %s" % (name, msg))

    codec_id, magic = CODECS[codec]
    b = DefaultRecordBatch(batch)
    if b.magic != 2:
        fail("magic %d" % b.magic)
    if not b.validate_crc():
        fail("CRC does not match")
    if b.compression_type != codec_id:
        fail("attributes 0x%04x carry codec %d, not %s (%d): kafka-python sends "
             "a batch uncompressed when compression does not make it smaller; "
             "give this case compressible records"
             % (b.attributes, b.compression_type, codec, codec_id))
    section = batch[HEADER_SIZE:]
    if not section.startswith(magic):
        fail("records section does not start with the %s magic" % codec)
    if codec == "gzip" and struct.unpack_from("<I", section, 4)[0] != GZIP_MTIME:
        fail("gzip header time is not pinned")
    if b.is_transactional != fields["transactional"]:
        fail("transactional bit")
    if b.timestamp_type != 0:
        fail("timestamp type is not create time")
    if struct.unpack_from(">q", batch, 0)[0] != 0:
        fail("base offset is not 0")
    if b.first_timestamp != records[0]["timestamp"]:
        fail("base timestamp")
    if b.max_timestamp != max(r["timestamp"] for r in records):
        fail("max timestamp")
    if b.last_offset_delta != records[-1]["offset_delta"]:
        fail("last offset delta")
    pid, epoch, seq = struct.unpack_from(">qhi", batch, 43)
    if (pid, epoch, seq) != (fields["producer_id"], fields["producer_epoch"],
                             fields["base_sequence"]):
        fail("producer fields")
    got = [(r.offset, r.timestamp, r.key, r.value,
            [(k, v) for k, v in r.headers]) for r in b]
    want = [(r["offset_delta"], r["timestamp"], r["key"], r["value"],
             list(r["headers"])) for r in records]
    if got != want:
        fail("kafka-python reads back other records")
    if name.startswith("lz4, one record of 64 KiB"):
        # FLG, BD: block maximum 64 KiB, and more than that to compress.
        if (section[5] >> 4) & 7 != 4:
            fail("lz4 block maximum is not 64 KiB")
        if len(lz4.frame.decompress(section)) <= 64 * 1024:
            fail("lz4 frame does not span two blocks")


def hexn(b):
    return None if b is None else b.hex()


def make_doc():
    cases = []
    for index, (name, codec, fields, make) in enumerate(CASES):
        rng = Rng(SEED + 1000003 * (index + 1))
        records = make(rng)
        batch = build(codec, fields, records)
        check(name, codec, fields, records, batch)
        cases.append({
            "name": name,
            "compression": codec,
            "base_offset": 0,
            "partition_leader_epoch": 0,
            "timestamp_type": "create",
            "transactional": fields["transactional"],
            "producer_id": fields["producer_id"],
            "producer_epoch": fields["producer_epoch"],
            "base_sequence": fields["base_sequence"],
            "records": [{
                "offset_delta": r["offset_delta"],
                "timestamp": r["timestamp"],
                "key": hexn(r["key"]),
                "value": hexn(r["value"]),
                "headers": [[k, hexn(v)] for k, v in r["headers"]],
            } for r in records],
            "batch_hex": batch.hex(),
            "byte_exact": codec == "none",
            "note": NOTE,
        })
    return {
        "format": "Kafka RecordBatch v2 (magic 2), base offset 0, made by "
                  "python-kafka %s" % kafka.__version__,
        "made_with": {
            "generator": "tests/tools/make_kafka_vectors.py",
            "kafka-python": kafka.__version__,
            "zlib": zlib.ZLIB_RUNTIME_VERSION,
            "python-lz4": lz4.__version__,
            "liblz4": lz4.library_version_string(),
            "python-zstandard": zstandard.__version__,
            "libzstd": ".".join(map(str, zstandard.ZSTD_VERSION)),
        },
        "cases": cases,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="file to write")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if the file differs")
    args = ap.parse_args()

    if MISSING:
        die("missing Python modules; install the Debian packages %s "
            "(deploy/install-deps.sh does), and run with /usr/bin/python3"
            % " ".join(MISSING))
    if kafka.__version__ != "2.0.2":
        print("make_kafka_vectors: warning: kafka-python %s, the file was made "
              "with 2.0.2" % kafka.__version__, file=sys.stderr)
    # kafka.codec picks its codecs at import; refuse to run without them
    # rather than let a case fail later or come out uncompressed.
    for has, pkg in ((kafka.codec.has_lz4, "python3-lz4"),
                     (kafka.codec.has_zstd, "python3-zstandard")):
        if not has():
            die("kafka-python finds no codec module from %s" % pkg)
    kafka.codec.gzip = _PinnedGzip()

    text = json.dumps(make_doc(), indent=1) + "\n"
    out = os.path.normpath(args.out)
    if args.check:
        try:
            with open(out, encoding="utf-8") as f:
                same = f.read() == text
        except FileNotFoundError:
            same = False
        if not same:
            die("%s is stale: re-run without --check" % out)
        print("make_kafka_vectors: %s is up to date" % out)
        return
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    print("make_kafka_vectors: wrote %d cases, %d bytes to %s"
          % (len(CASES), len(text), out))


if __name__ == "__main__":
    main()
