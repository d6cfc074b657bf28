#!/usr/bin/python3
"""SASL logins on Ferry's Kafka port over TLS (tests/kafka/kafka_security_test.cpp).

  raw HOST:PORT CA                 the login protocol by hand: a request before
                                   the login, an unknown mechanism, SaslAuthenticate
                                   without a handshake, a wrong PLAIN password, an
                                   unknown SCRAM user, a replayed SCRAM proof, and
                                   a good SCRAM login; prints "ok <check>" each
  clients HOST:PORT CA USER PASSWORD MECHANISM TOPIC N
                                   kafka-python (SaslHandshake v0, raw tokens)
                                   produces N records with acks=all and reads them
                                   back; prints "produced N" and "consumed N"
  guess HOST:PORT CA USER N        N wrong PLAIN passwords for USER, one login per
                                   connection; prints "refused N" when each was
  denied HOST:PORT CA USER PASSWORD TOPIC
                                   a produce the ACLs refuse (to a topic the user
                                   may describe: kafka-python waits for metadata
                                   of one it may not); prints "denied write"

Every socket has a timeout, so the script always ends.
"""
import socket
import ssl
import struct
import sys

from kafka.scram import ScramClient


class Conn:
    def __init__(self, host, port, ca):
        ctx = ssl.create_default_context(cafile=ca)
        raw = socket.create_connection((host, port), timeout=10)
        self.s = ctx.wrap_socket(raw, server_hostname=host)
        self.s.settimeout(10)
        self.corr = 0

    def _read_exact(self, n):
        data = b""
        while len(data) < n:
            chunk = self.s.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def request(self, key, version, body):
        """The response body (after the correlation id), or None if the
        connection closed."""
        self.corr += 1
        msg = struct.pack(">hhih", key, version, self.corr, -1) + body
        try:
            self.s.sendall(struct.pack(">i", len(msg)) + msg)
            size = self._read_exact(4)
            if size is None:
                return None
            frame = self._read_exact(struct.unpack(">i", size)[0])
        except (ConnectionError, ssl.SSLError, socket.timeout):
            return None
        if frame is None:
            return None
        assert struct.unpack(">i", frame[:4])[0] == self.corr
        return frame[4:]

    def close(self):
        self.s.close()


def kstring(x):
    b = x.encode()
    return struct.pack(">h", len(b)) + b


def kbytes(b):
    return struct.pack(">i", len(b)) + b


def read_string(b, at):
    n = struct.unpack(">h", b[at:at + 2])[0]
    return b[at + 2:at + 2 + n].decode(), at + 2 + n


def handshake(c, mechanism, version=1):
    body = c.request(17, version, kstring(mechanism))
    err = struct.unpack(">h", body[:2])[0]
    count = struct.unpack(">i", body[2:6])[0]
    at, mechanisms = 6, []
    for _ in range(count):
        m, at = read_string(body, at)
        mechanisms.append(m)
    return err, mechanisms


def authenticate(c, token):
    """(error, message, auth bytes) or None if the connection closed."""
    body = c.request(36, 1, kbytes(token))
    if body is None:
        return None
    err = struct.unpack(">h", body[:2])[0]
    n = struct.unpack(">h", body[2:4])[0]
    message = None if n < 0 else body[4:4 + n].decode()
    at = 4 + max(n, 0)
    size = struct.unpack(">i", body[at:at + 4])[0]
    return err, message, body[at + 4:at + 4 + size]


def closed(c):
    """True once the server closed the connection."""
    try:
        return c.s.recv(1) == b""
    except (ConnectionError, ssl.SSLError):
        return True
    except socket.timeout:
        return False


def fail(why):
    print("FAILED " + why)
    sys.exit(1)


def raw(host, port, ca):
    # Anything but ApiVersions and the SASL requests closes the connection.
    c = Conn(host, port, ca)
    if c.request(18, 0, b"") is None:
        fail("ApiVersions before the login was not answered")
    if c.request(3, 1, struct.pack(">i", -1)) is not None:
        fail("Metadata before the login was answered")
    print("ok metadata-before-login-closes")
    c.close()

    c = Conn(host, port, ca)
    err, mechanisms = handshake(c, "GSSAPI")
    if err != 33 or mechanisms != ["PLAIN", "SCRAM-SHA-256"]:
        fail("unknown mechanism: %d %r" % (err, mechanisms))
    print("ok unsupported-mechanism")
    c.close()

    c = Conn(host, port, ca)
    r = authenticate(c, b"\0alice\0x")
    if r is None or r[0] != 34:
        fail("SaslAuthenticate without a handshake: %r" % (r,))
    print("ok authenticate-without-handshake")
    c.close()

    c = Conn(host, port, ca)
    handshake(c, "PLAIN")
    r = authenticate(c, b"\0alice\0not-her-password")
    if r is None or r[0] != 58 or "unknown user or wrong password" not in (r[1] or ""):
        fail("wrong PLAIN password: %r" % (r,))
    if not closed(c):
        fail("the connection stayed open after a failed login")
    print("ok plain-wrong-password")

    c = Conn(host, port, ca)
    handshake(c, "SCRAM-SHA-256")
    scram = ScramClient("nobody", "whatever-1", "SCRAM-SHA-256")
    r = authenticate(c, scram.first_message().encode())
    if r is None or r[0] != 0:
        fail("an unknown user's client-first was not answered like a known one's: %r" % (r,))
    scram.process_server_first_message(r[2].decode())
    r = authenticate(c, scram.final_message().encode())
    if r is None or r[0] != 58 or "unknown user or wrong password" not in (r[1] or ""):
        fail("unknown SCRAM user: %r" % (r,))
    print("ok scram-unknown-user")

    # A proof seen on the wire is no good in another conversation: the
    # server's nonce differs.
    c = Conn(host, port, ca)
    handshake(c, "SCRAM-SHA-256")
    scram = ScramClient("alice", "alice-secret-1", "SCRAM-SHA-256")
    first = scram.first_message().encode()
    r = authenticate(c, first)
    scram.process_server_first_message(r[2].decode())
    final = scram.final_message().encode()
    r = authenticate(c, final)
    if r is None or r[0] != 0:
        fail("alice's SCRAM login: %r" % (r,))
    scram.process_server_final_message(r[2].decode())
    if c.request(3, 1, struct.pack(">i", 0)) is None:
        fail("Metadata after the login was not answered")
    print("ok scram-login")
    c.close()
    c = Conn(host, port, ca)
    handshake(c, "SCRAM-SHA-256")
    r = authenticate(c, first)
    if r is None or r[0] != 0:
        fail("client-first of the replay: %r" % (r,))
    r = authenticate(c, final)
    if r is None or r[0] != 58:
        fail("a replayed SCRAM proof was taken: %r" % (r,))
    print("ok scram-replay-refused")


def guess(host, port, ca, user, n):
    refused = 0
    for i in range(n):
        c = Conn(host, port, ca)
        handshake(c, "PLAIN")
        r = authenticate(c, ("\0%s\0guess-%d" % (user, i)).encode())
        if r is not None and r[0] == 58:
            refused += 1
        c.close()
    print("refused %d" % refused)


def client_config(bootstrap, ca, user, password, mechanism):
    return dict(bootstrap_servers=bootstrap, security_protocol="SASL_SSL",
                ssl_cafile=ca, sasl_mechanism=mechanism,
                sasl_plain_username=user, sasl_plain_password=password,
                request_timeout_ms=20000, api_version_auto_timeout_ms=10000)


def clients(bootstrap, ca, user, password, mechanism, topic, n):
    from kafka import KafkaConsumer, KafkaProducer
    cfg = client_config(bootstrap, ca, user, password, mechanism)
    producer = KafkaProducer(acks="all", **cfg)
    futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i) for i in range(n)]
    producer.flush(30)
    for f in futures:
        f.get(timeout=30)
    producer.close(10)
    print("produced %d" % n)
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest",
                             consumer_timeout_ms=8000, **cfg)
    wanted = {b"v%d" % i for i in range(n)}
    seen = set()
    for message in consumer:
        if message.value in wanted:
            seen.add(message.value)
        if len(seen) == n:
            break
    consumer.close()
    print("consumed %d" % len(seen))


def denied(bootstrap, ca, user, password, topic):
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError
    producer = KafkaProducer(acks="all", retries=0, max_block_ms=20000,
                             **client_config(bootstrap, ca, user, password, "SCRAM-SHA-256"))
    try:
        producer.send(topic, value=b"x").get(timeout=30)
        print("written")
    except TopicAuthorizationFailedError:
        print("denied write")
    except Exception as e:  # the metadata wait reports it this way too
        print("denied write" if "TopicAuthorizationFailed" in repr(e) else "error %r" % (e,))
    producer.close(5)


def main():
    mode, bootstrap = sys.argv[1], sys.argv[2]
    host, port = bootstrap.rsplit(":", 1)
    if mode == "raw":
        raw(host, int(port), sys.argv[3])
    elif mode == "guess":
        guess(host, int(port), sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif mode == "clients":
        clients(bootstrap, *sys.argv[3:8], int(sys.argv[8]))
    elif mode == "denied":
        denied(bootstrap, *sys.argv[3:7])
    else:
        fail("unknown mode " + mode)


if __name__ == "__main__":
    main()
