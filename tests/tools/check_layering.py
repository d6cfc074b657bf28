#!/usr/bin/env python3
"""Fails when an include goes the wrong way between Ferry's rooms.

Each source file belongs to one room, found from its path; each room may
include only the rooms listed for it below (and itself), and none may include
a library it does not need (LMDB in the client, Qt in the server, ...).
Nothing includes a program's folder (actors/programs/). A source file under
broker/, metrics/, actors/ or gui/ that is in no room fails too: a new file
must be placed in a room on purpose.

    check_layering.py [--root DIR]   check a tree (default: this repository)
    check_layering.py --self-test    check that every rule fires

The rooms are the README's tour (broker/README.md, actors/README.md).
"""

import argparse
import os
import re
import sys
import tempfile

# broker/ files of ferry_core: what the client library may use. Keep in step
# with broker/CMakeLists.txt (ferry_core) and broker/README.md.
BROKER_CORE = {
    "error", "crc32c", "compression", "record_batch", "partitioner",
    "topic_config", "retry_policy", "lease_table", "model", "varint",
    "messages", "raft_types", "big_endian",
}

# broker/ files of ferry_security: users, ACLs, the SCRAM exchange and the
# audit log; installed with the client library, whose sessions log in with
# them. Keep in step with broker/CMakeLists.txt (ferry_security).
BROKER_SECURITY = {"security", "scram_exchange", "audit_log"}

# metrics/ files of ferry_prometheus_text: reading the text format, plain
# C++, what the console may use of metrics/. Keep in step with
# metrics/CMakeLists.txt (ferry_prometheus_text).
METRICS_TEXT = {"prometheus_text"}

# room -> rooms it may include (itself always allowed).
ALLOWED = {
    "broker-core": set(),
    "broker": {"broker-core", "broker-security"},
    "broker-security": {"broker-core"},
    "metrics-text": set(),
    "metrics": {"broker-core", "broker", "broker-security", "metrics-text"},
    "protocol": {"broker-core"},
    "client": {"broker-core", "broker-security", "protocol"},
    "server": {"broker-core", "broker", "broker-security", "metrics", "metrics-text",
               "protocol", "client"},
    "http": {"broker-core", "broker", "broker-security", "protocol"},
    "kafka": {"broker-core", "broker", "broker-security", "protocol"},
    "gui": {"broker-core", "protocol", "client", "metrics-text"},
    "programs": {"broker-core", "broker", "broker-security", "metrics", "metrics-text",
                 "protocol", "client", "server", "http", "kafka"},
    "tests": {"broker-core", "broker", "broker-security", "metrics", "metrics-text",
              "protocol", "client", "server", "http", "kafka", "gui", "tests"},
}

# room -> system headers (prefixes) it must not include.
SERVER_ONLY = ("lmdb.h", "prometheus/", "boost/")
QT = ("Q", "QtCore/", "QtWidgets/", "QtCharts/", "QtNetwork/")
FORBIDDEN_SYSTEM = {
    "broker-core": SERVER_ONLY + QT + ("spdlog/", "caf/io/"),
    "broker": ("prometheus/", "boost/", "caf/io/") + QT,
    "broker-security": SERVER_ONLY + QT + ("spdlog/", "caf/io/"),
    "metrics-text": SERVER_ONLY + QT + ("spdlog/", "caf/"),
    "metrics": ("boost/", "lmdb.h") + QT,
    "protocol": SERVER_ONLY + QT + ("spdlog/", "caf/io/"),
    "client": SERVER_ONLY + QT + ("spdlog/",),
    "server": ("boost/",) + QT,
    "http": ("lmdb.h", "prometheus/") + QT,
    "kafka": ("lmdb.h", "prometheus/") + QT,
    "gui": SERVER_ONLY + ("spdlog/",),
}

SOURCE_ENDINGS = (".hpp", ".cpp", ".h", ".cc")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def room_of(rel):
    """The room of a path relative to the repository root, or None."""
    parts = rel.split("/")
    top = parts[0]
    if top == "broker" and len(parts) == 2:
        stem = os.path.splitext(parts[1])[0]
        if stem in BROKER_CORE:
            return "broker-core"
        return "broker-security" if stem in BROKER_SECURITY else "broker"
    if top == "metrics" and len(parts) == 2:
        stem = os.path.splitext(parts[1])[0]
        return "metrics-text" if stem in METRICS_TEXT else "metrics"
    if top == "actors" and len(parts) == 3 and parts[1] in (
            "protocol", "client", "server", "http", "kafka", "programs"):
        return parts[1]
    if top == "gui" and len(parts) == 2:
        return "gui"
    if top == "tests":
        return "tests"
    return None


def sources(root):
    for top in ("broker", "metrics", "actors", "gui", "tests"):
        base = os.path.join(root, top)
        for dirpath, _, files in os.walk(base):
            for name in sorted(files):
                if name.endswith(SOURCE_ENDINGS):
                    path = os.path.join(dirpath, name)
                    yield os.path.relpath(path, root).replace(os.sep, "/")


def check(root):
    """Returns the list of violations in the tree at root."""
    problems = []
    for rel in sources(root):
        room = room_of(rel)
        if room is None:
            problems.append(f"{rel}: in no room (see actors/README.md)")
            continue
        with open(os.path.join(root, rel), encoding="utf-8",
                  errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                kind, target = m.groups()
                where = f"{rel}:{lineno}"
                if kind == '"':
                    if not os.path.exists(os.path.join(root, target)):
                        continue  # relative includes (moc files, own dir)
                    if target.startswith("actors/programs/") and room != "programs":
                        problems.append(
                            f"{where}: {room} includes a program's file {target}")
                        continue
                    other = room_of(target)
                    if other is None:
                        problems.append(f"{where}: includes {target}, in no room")
                    elif other != room and other not in ALLOWED[room]:
                        problems.append(
                            f"{where}: {room} must not include {other} ({target})")
                else:
                    for bad in FORBIDDEN_SYSTEM.get(room, ()):
                        if target.startswith(bad):
                            problems.append(
                                f"{where}: {room} must not include <{target}>")
                            break
    return problems


def self_test():
    """Builds small trees that break each rule and checks each is caught."""
    cases = {
        "broker includes actors": {
            "broker/x.cpp": '#include "actors/protocol/interfaces.hpp"\n',
            "actors/protocol/interfaces.hpp": ""},
        "broker includes metrics": {
            "broker/x.cpp": '#include "metrics/m.hpp"\n', "metrics/m.hpp": ""},
        "core includes storage": {
            "broker/record_batch.cpp": '#include "broker/lmdb.hpp"\n',
            "broker/lmdb.hpp": ""},
        "core includes lmdb": {"broker/error.cpp": "#include <lmdb.h>\n"},
        "client includes server": {
            "actors/client/p.cpp": '#include "actors/server/node.hpp"\n',
            "actors/server/node.hpp": ""},
        "client includes prometheus": {
            "actors/client/p.cpp": "#include <prometheus/counter.h>\n"},
        "gui includes metrics": {
            "gui/w.cpp": '#include "metrics/m.hpp"\n', "metrics/m.hpp": ""},
        "text reader includes prometheus-cpp": {
            "metrics/prometheus_text.cpp": "#include <prometheus/text_serializer.h>\n"},
        "text reader includes metrics": {
            "metrics/prometheus_text.cpp": '#include "metrics/m.hpp"\n',
            "metrics/m.hpp": ""},
        "gui includes server": {
            "gui/w.cpp": '#include "actors/server/node.hpp"\n',
            "actors/server/node.hpp": ""},
        "server includes http": {
            "actors/server/n.cpp": '#include "actors/http/http_json.hpp"\n',
            "actors/http/http_json.hpp": ""},
        "test includes a program": {
            "tests/t.cpp": '#include "actors/programs/ferryctl_table.hpp"\n',
            "actors/programs/ferryctl_table.hpp": ""},
        "file in no room": {"actors/interfaces.hpp": ""},
    }
    clean = {
        "broker/record_batch.cpp": '#include "broker/crc32c.hpp"\n#include <zstd.h>\n',
        "broker/crc32c.hpp": "",
        "broker/lmdb.cpp": '#include "broker/error.hpp"\n#include <lmdb.h>\n',
        "broker/error.hpp": "",
        "actors/client/p.cpp": '#include "actors/protocol/i.hpp"\n',
        "actors/protocol/i.hpp": '#include "broker/messages.hpp"\n',
        "broker/messages.hpp": "",
        "actors/server/n.cpp": '#include "actors/client/p.hpp"\n#include "metrics/m.hpp"\n',
        "actors/client/p.hpp": "", "metrics/m.hpp": "",
        "actors/programs/main.cpp": '#include "actors/programs/t.hpp"\n#include "actors/server/n.hpp"\n',
        "actors/programs/t.hpp": "", "actors/server/n.hpp": "",
        "gui/w.cpp": '#include "actors/client/p.hpp"\n#include <QWidget>\n#include "w.moc"\n'
                     '#include "metrics/prometheus_text.hpp"\n',
        "metrics/prometheus_text.hpp": "#include <string>\n",
    }
    failures = 0

    def make(files):
        d = tempfile.mkdtemp(prefix="ferry-layering-")
        for rel, text in files.items():
            path = os.path.join(d, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return d

    for name, files in cases.items():
        found = check(make(files))
        status = "caught" if found else "MISSED"
        failures += 0 if found else 1
        print(f"self-test {name}: {status} {found[:1]}")
    found = check(make(clean))
    print(f"self-test clean tree: {'ok' if not found else 'FALSE ALARM'} {found}")
    failures += 1 if found else 0
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        failed = self_test()
        print("self-test: every rule fires" if not failed else f"self-test: {failed} rule(s) did not fire")
        return 1 if failed else 0
    problems = check(os.path.abspath(args.root))
    for p in problems:
        print(p)
    if problems:
        print(f"layering: {len(problems)} include(s) go the wrong way")
        return 1
    print("layering: every include goes down the rooms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
