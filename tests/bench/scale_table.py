#!/usr/bin/python3
"""Ferry scale table (issue 15, "partitions must scale a topic").

What it measures
    For the build in --bin, the rows of issue 15's tables, each on its own
    fresh ferryd process(es) on 127.0.0.1 (free ports, a temp data dir per
    node), one after the other:

    1n-3, 1n-1000, 1n-10000
        1 node, 3 / 1,000 / 10,000 partitions: one producer, 1 KB,
        acks=all, 100k distinct keys (`ferry-bench produce --keys 100000
        --size 1024 --acks all`), closed loop: msgs/s and p99.
    3n-3, 3n-300, 3n-3000
        the same on 3 nodes (one Raft metadata quorum of 3), RF=3.
    3n-300-rate
        3 nodes, RF=3, 300 partitions, paced at 30k msgs/s (`--rate 30000`):
        the achieved rate and p99 (latency from the intended send time).
    consume-1000
        1 node, 1,000 partitions: fill with the producer above, then
        `ferry-bench consume` from the earliest offsets: msgs/s.
    idle-1000, idle-10000
        1 node holding N partition replicas (a fresh N-partition topic, no
        data) and nothing to do: RSS (and RSS per replica above an empty
        node), threads, open files, CPU over ~5 s, then SIGTERM and a
        restart: seconds until "listening on" and until a 1,000-key produce
        succeeds again ("serving").
    create-delete-10000
        1 node: `ferryctl topic create` of a 10,000-partition topic and
        `ferryctl topic delete` of it, timed, and how long until the data
        dir holds no directory of that topic (or how many are left).

    Every produce/consume row also gives the node's RSS, threads and open
    files at the end of the run (3 nodes: the largest of the three, all
    three in --json) and the CPU seconds ferryd (all nodes) and ferry-bench
    used during the run. Figures come from /proc/<pid>/{status,stat,fd} and
    from ferry-bench's own rusage.

    A row that fails (a timeout, a ferryd that dies, ferryctl or ferry-bench
    failing, e.g. at the file-descriptor limit) is printed as FAILED with the
    error text and the last lines of each ferryd log, and the next row runs.
    Every row is bounded by --row-timeout; every process this script starts
    is stopped (SIGTERM, then SIGKILL) when its row ends, on errors, on
    Ctrl-C and on SIGTERM.

How to run it (Debian's python3, standard library only)
    tests/bench/scale_table.py                  # full table, build/bin next to the repo
    tests/bench/scale_table.py --quick          # smoke run, small counts, ~1-2 minutes
    tests/bench/scale_table.py --rows 1n-1000,3n    # some rows ("3n": every 3n-* row)
    tests/bench/scale_table.py --list           # the row ids
    tests/bench/scale_table.py --paced-rates 2000,10000 --rows 3n-300-rate
                                                # the paced row at more rates
    tests/bench/scale_table.py --bin /path/to/build/bin --json > scale.json

    The table goes to stdout, progress to stderr. Use a quiet machine: a
    compile next to it changes the figures several times over.

How long it takes
    --quick: about a minute (two on a busy machine). The full table:
    ~10-15 minutes on today's build (2 cores); each row is capped at
    --row-timeout (default 180 s), a topic create at --create-timeout (60 s).
    The message counts per row are in ROWS below; the slow rows (many
    partitions) have smaller counts so that each takes at most ~2 minutes.
"""

import argparse
import json
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024

# -- the rows ------------------------------------------------------------------------
#
# id: what --rows selects; kind: which function runs it; nodes: 1 or 3;
# partitions and messages: (full table, --quick). The ids name the full
# table's row; --quick runs the same row with the smaller counts (the printed
# setup shows the counts actually used).
ROWS = [
    dict(id="1n-3", kind="produce", nodes=1, partitions=(3, 3), messages=(1_000_000, 50_000)),
    dict(id="1n-1000", kind="produce", nodes=1, partitions=(1000, 100), messages=(500_000, 20_000)),
    # today: ~3 open files per partition, so 10,000 partitions need ~30,000
    # descriptors against a limit of 20,000 (the row fails at the create).
    dict(id="1n-10000", kind="produce", nodes=1, partitions=(10000, 1000), messages=(200_000, 20_000)),
    dict(id="3n-3", kind="produce", nodes=3, partitions=(3, 3), messages=(500_000, 30_000)),
    dict(id="3n-300", kind="produce", nodes=3, partitions=(300, 30), messages=(300_000, 20_000)),
    # 2026-12-03: the create takes ~5 s here and produce runs at ~8-9k msgs/s;
    # 60,000 messages keep the row under a minute and long enough for its
    # CPU column to mean something (10,000 took ~1 s)
    dict(id="3n-3000", kind="produce", nodes=3, partitions=(3000, 300), messages=(60_000, 10_000)),
    dict(id="3n-300-rate", kind="produce", nodes=3, partitions=(300, 30), messages=(300_000, 30_000),
         rate=30000),
    dict(id="consume-1000", kind="consume", nodes=1, partitions=(1000, 100), messages=(500_000, 20_000)),
    dict(id="idle-1000", kind="idle", nodes=1, partitions=(1000, 100)),
    dict(id="idle-10000", kind="idle", nodes=1, partitions=(10000, 300)),
    dict(id="create-delete-10000", kind="create_delete", nodes=1, partitions=(10000, 300)),
]

KEYS = 100_000      # distinct keys of the producer
SIZE = 1024         # payload bytes
IDLE_SECONDS = 5.0  # how long the idle CPU is measured
SETTLE_SECONDS = 15.0  # pause after a create before idle figures are taken:
# replicas with nothing to do go quiet after 3 idle 1 s ticks (10 s ticks then)


class RowFailed(Exception):
    """A row could not finish; the message says why (and shows ferryd logs)."""


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM: stop everything, print what we have."""


# Every process this script started and has not reaped yet: stopped on exit.
LIVE = []


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# -- /proc -----------------------------------------------------------------------------

def cpu_seconds(pid):
    """utime + stime of a running process, in seconds (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # after "(comm)": state ppid pgrp session tty tpgid flags minflt cminflt
    # majflt cmajflt utime stime ...
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy_seconds():
    """CPU seconds all processes of the machine used so far, summed over
    the cores (/proc/stat: user nice system irq softirq steal)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)) / CLK_TCK


def proc_figures(pid):
    """RSS (KB), thread count and open descriptors of a running process."""
    out = {"rss_kb": None, "threads": None, "open_files": None}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    out["rss_kb"] = int(line.split()[1])
                elif line.startswith("Threads:"):
                    out["threads"] = int(line.split()[1])
        out["open_files"] = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        pass  # it exited meanwhile: the caller notices that separately
    return out


# -- ports -----------------------------------------------------------------------------

def free_ports(n):
    """n distinct TCP ports on 127.0.0.1 that are bindable right now, taken
    below the kernel's ephemeral range (a port in it can be taken at any time
    by some outgoing connection)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError):
        low = 32768
    if low < 12000:
        low = 61000
    ports = []
    for _ in range(1000):
        p = random.randint(10000, low - 1)
        if p in ports:
            continue
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", p))
            ports.append(p)
        except OSError:
            pass
        finally:
            s.close()
        if len(ports) == n:
            return ports
    raise RowFailed("no free ports found")


# -- running commands ------------------------------------------------------------------

def stop_process(p, timeout, signaled=False):
    """SIGTERM (unless `signaled`: sent already), up to `timeout` s, then
    SIGKILL. Returns how it ended."""
    if p.poll() is not None:
        return "exited"
    how = "SIGTERM"
    try:
        if not signaled:
            p.send_signal(signal.SIGTERM)
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        how = f"SIGKILL (still up {timeout:.0f} s after SIGTERM)"
        p.kill()
        p.wait(10)
    finally:
        if p in LIVE and p.poll() is not None:
            LIVE.remove(p)
    return how


def run(argv, deadline, what, cwd=None):
    """Runs argv until it exits or `deadline` (time.monotonic()) passes.

    Returns dict(rc, out, err, cpu_s, seconds): cpu_s is the user+system time
    of the child (its rusage). On the deadline the child is stopped and
    RowFailed raised."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        p = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                             cwd=cwd, start_new_session=True)
        LIVE.append(p)
        try:
            while True:
                # os.wait4 gives the child's rusage; Popen is told the result.
                pid, status, ru = os.wait4(p.pid, os.WNOHANG)
                if pid == p.pid:
                    p.returncode = os.waitstatus_to_exitcode(status)
                    LIVE.remove(p)
                    break
                if time.monotonic() > deadline:
                    stop_process(p, 5)
                    out.seek(0), err.seek(0)
                    raise RowFailed(f"{what}: timed out after {time.monotonic() - t0:.0f} s "
                                    f"(the row's bound)\n  stderr: "
                                    + tail_text(err.read().decode(errors="replace"), 10))
                time.sleep(0.02)
        except BaseException:
            if p.poll() is None:
                stop_process(p, 5)
            raise
        seconds = time.monotonic() - t0
        out.seek(0), err.seek(0)
        return dict(rc=p.returncode, out=out.read().decode(errors="replace"),
                    err=err.read().decode(errors="replace"),
                    cpu_s=ru.ru_utime + ru.ru_stime, seconds=seconds)


def tail_text(text, n):
    lines = text.strip().splitlines()[-n:]
    return "\n    ".join(lines) if lines else "(empty)"


def parse_json(text):
    """`text` parsed as JSON (any value), or None."""
    try:
        return json.loads(text)
    except ValueError:
        return None


def last_json(text):
    """The last line of `text` that parses as a JSON object (or None)."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


# -- ferryd ----------------------------------------------------------------------------

class Node:
    """One ferryd: its port, data dir and log (stdout+stderr appended)."""

    def __init__(self, bin_dir, work, node_id, port, voters, peer_port=None):
        self.bin_dir = bin_dir
        self.node_id = node_id
        self.port = port
        self.peer_port = peer_port  # ferryd --peer-port (clusters with --auth)
        self.voters = voters  # "1@127.0.0.1:P1,..." or None (single node)
        self.dir = os.path.join(work, f"node-{node_id}")
        self.data_dir = os.path.join(self.dir, "data")
        self.log_path = os.path.join(self.dir, "ferryd.log")
        os.makedirs(self.data_dir, exist_ok=True)
        self.proc = None
        self.log_offset = 0
        self.started_at = None

    def start(self):
        args = [os.path.join(self.bin_dir, "ferryd"), "--data-dir", self.data_dir,
                "--host", "127.0.0.1", "--port", str(self.port),
                "--metrics-port", "-1", "--http-port", "-1"]
        if self.voters:
            args += ["--node-id", str(self.node_id), "--voters", self.voters]
        if self.peer_port:
            args += ["--peer-port", str(self.peer_port)] + TLS["peer"]
        args += FERRYD_EXTRA + TLS["node"]
        with open(self.log_path, "ab") as f:
            self.log_offset = f.tell()
            self.proc = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        LIVE.append(self.proc)
        self.started_at = time.monotonic()

    def listening(self):
        """Whether this run's log has the "listening on" line yet."""
        with open(self.log_path, "rb") as f:
            f.seek(self.log_offset)
            return any(line.startswith(b"listening on ") for line in f)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def pid(self):
        return self.proc.pid

    def stop(self, timeout=35, signaled=False):
        return stop_process(self.proc, timeout, signaled) if self.proc else "not started"

    def log_tail(self, n=15):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 64 * 1024))
                text = f.read().decode(errors="replace")
        except OSError:
            return "(no log)"
        return tail_text(text, n)

    def log_errors(self):
        """(first error line, how many lines say "Too many open files")."""
        first, emfile = None, 0
        try:
            with open(self.log_path, "rb") as f:
                for line in f:
                    if first is None and (b" error " in line or b" critical " in line):
                        first = line.decode(errors="replace").strip()
                    if b"Too many open files" in line:
                        emfile += 1
        except OSError:
            pass
        return first, emfile

    def describe_exit(self):
        rc = self.proc.returncode
        how = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit code {rc}"
        return f"ferryd node {self.node_id} (port {self.port}) died ({how})"


class Cluster:
    """1 node (a Raft quorum of one) or n voters on 127.0.0.1."""

    def __init__(self, bin_dir, work, n):
        # With --auth a cluster's nodes talk on peer ports (ferryd needs them).
        peers = n > 1 and TLS.get("peer") is not None
        ports = free_ports(2 * n if peers else n)
        peer_ports = ports[n:] if peers else [None] * n
        ports = ports[:n]
        listed = peer_ports if peers else ports
        voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(listed)) if n > 1 else None
        self.nodes = [Node(bin_dir, work, i + 1, p, voters, peer_ports[i])
                      for i, p in enumerate(ports)]
        self.brokers = ",".join(f"127.0.0.1:{p}" for p in ports)

    def start(self, deadline):
        for node in self.nodes:
            node.start()
        self.wait_listening(deadline)

    def wait_listening(self, deadline, nodes=None):
        pending = list(nodes or self.nodes)
        while pending:
            for node in list(pending):
                if node.listening():
                    pending.remove(node)
                elif not node.alive():
                    raise RowFailed(f"{node.describe_exit()} before it listened")
            if pending and time.monotonic() > deadline:
                ids = ", ".join(str(x.node_id) for x in pending)
                raise RowFailed(f"no 'listening on' from node(s) {ids} within the row's bound")
            if pending:
                time.sleep(0.05)

    def check_alive(self):
        for node in self.nodes:
            if node.proc is not None and not node.alive():
                raise RowFailed(node.describe_exit())

    def cpu(self):
        """CPU seconds of every node, summed."""
        self.check_alive()
        return sum(cpu_seconds(n.pid()) for n in self.nodes)

    def figures(self):
        return [proc_figures(n.pid()) for n in self.nodes]

    def stop(self, timeout=35):
        """SIGTERM to all at once; SIGKILL to those still up `timeout` s later
        (ferryd's own --shutdown-timeout is 30 s)."""
        notes = []
        running = [n for n in self.nodes if n.alive()]
        for node in running:
            try:
                node.proc.send_signal(signal.SIGTERM)
            except OSError:
                pass
        until = time.monotonic() + timeout
        for node in running:
            # the remaining time of the shared bound (a few s at least)
            how = node.stop(max(2.0, until - time.monotonic()), signaled=True)
            if how.startswith("SIGKILL"):
                notes.append(f"node {node.node_id} needed SIGKILL (still up {timeout} s "
                             "after SIGTERM)")
        return notes

    def logs(self):
        """Per node: its figures if it still runs, its first error line, how
        often it hit the open-file limit, and the last lines of its log."""
        parts = []
        for n in self.nodes:
            first, emfile = n.log_errors()
            head = f"  ferryd node {n.node_id}"
            if n.alive():
                f = proc_figures(n.pid())
                head += (f" (still up: RSS {fmt_mb(f['rss_kb'])}, {fmt_int(f['threads'])} threads, "
                         f"{fmt_int(f['open_files'])} open files)")
            elif n.proc is not None:
                head += " (" + n.describe_exit() + ")"
            if emfile:
                head += f"\n    hit the open-file limit: {emfile:,} log lines say 'Too many open files'"
            if first:
                head += f"\n    first error: {first}"
            parts.append(f"{head}\n    last lines of its log:\n    {n.log_tail()}")
        return "\n".join(parts)

    def hit_fd_limit(self):
        return any(n.log_errors()[1] for n in self.nodes)


# -- ferryctl / ferry-bench --------------------------------------------------------------

def left_ms(deadline, cap_ms):
    """Milliseconds until the deadline, at most cap_ms and at least 1000."""
    return int(max(1000, min(cap_ms, (deadline - time.monotonic()) * 1000)))


def ferryctl(ctx, cluster, deadline, *args, cap_ms=120_000):
    argv = [os.path.join(ctx.bin, "ferryctl"), "--broker", cluster.brokers,
            "--connect-timeout", "10000",
            "--request-timeout", str(left_ms(deadline - 5, cap_ms))] + TLS["client"] + list(args)
    what = "ferryctl " + " ".join([a for a in args if not a.startswith("-")][:3])
    r = run(argv, deadline, what)
    if r["rc"] != 0:
        said = (r["out"] + r["err"]).strip().splitlines()
        raise RowFailed(f"{what}: exit {r['rc']} after {r['seconds']:.1f} s: "
                        f"{said[-1] if said else ''}\n  {' '.join(argv)}\n    "
                        + tail_text(r["out"] + r["err"], 10))
    return r


def create_topic(ctx, cluster, deadline, topic, partitions, res):
    """`ferryctl topic create`; res["create_s"] = its seconds. When it answers
    request_timeout the topic may still come up (issue 15 saw that): then wait
    (within the row's bound) until every partition is online, note the
    timeout in res["create_note"] and count create_s until then. A node at
    the open-file limit fails the row at once."""
    t0 = time.monotonic()
    try:
        ferryctl(ctx, cluster, deadline, "topic", "create", topic,
                 "--partitions", str(partitions),
                 "--replication-factor", str(len(cluster.nodes)),
                 cap_ms=int(ctx.create_timeout * 1000))
    except RowFailed as e:
        if "request_timeout" not in str(e) or cluster.hit_fd_limit():
            raise
        res["create_note"] = (f"topic create answered request_timeout after "
                              f"{time.monotonic() - t0:.0f} s")
        log(f"   {res['create_note']}; waiting for its {partitions:,} partitions to be online")
        wait_topic_online(ctx, cluster, deadline, topic, partitions, res["create_note"])
        res["create_note"] += f"; all partitions online after {time.monotonic() - t0:.0f} s"
    cluster.check_alive()
    res["create_answered_s"] = round(time.monotonic() - t0, 2)
    # ferryctl may answer before every replica has opened its log (ferryd
    # answers once its status round trip ends): create_s counts until every
    # node holds every partition's first segment, so no row measures a
    # node that is still creating files.
    wait_logs_hosted(cluster, deadline, topic, partitions)
    res["create_s"] = round(time.monotonic() - t0, 2)


def hosted_logs(node, topic):
    """Partitions of `topic` whose directory holds a segment (.log) file."""
    d = os.path.join(node.data_dir, "topics")
    prefix = topic + "-"
    n = 0
    try:
        for x in os.scandir(d):
            if x.name.startswith(prefix) and x.name[len(prefix):].isdigit():
                try:
                    if any(f.endswith(".log") for f in os.listdir(x.path)):
                        n += 1
                except OSError:
                    pass
    except OSError:
        return 0
    return n


def wait_logs_hosted(cluster, deadline, topic, partitions):
    """Until every node (RF = nodes in every row) holds a log of every
    partition; RowFailed at the row's bound."""
    while True:
        cluster.check_alive()
        counts = [hosted_logs(n, topic) for n in cluster.nodes]
        if min(counts) >= partitions:
            return
        if time.monotonic() > deadline - 10:
            raise RowFailed(f"only {min(counts):,} of {partitions:,} partition logs "
                            "exist at the row's bound")
        time.sleep(0.25)


def wait_topic_online(ctx, cluster, deadline, topic, partitions, why):
    """Polls `ferryctl --json topic describe` until all partitions are online
    with a leader; RowFailed at the deadline or the open-file limit."""
    online = 0
    while True:
        cluster.check_alive()
        if cluster.hit_fd_limit():
            raise RowFailed(f"{why}; then the node hit the open-file limit "
                            f"({online:,} of {partitions:,} partitions online)")
        if time.monotonic() > deadline - 10:
            raise RowFailed(f"{why}; {online:,} of {partitions:,} partitions online "
                            "at the row's bound")
        try:
            r = ferryctl(ctx, cluster, min(deadline, time.monotonic() + 30), "--json",
                         "topic", "describe", topic, cap_ms=20_000)
            d = parse_json(r["out"]) or {}
            st = d.get("partition_status") or []
            online = sum(1 for x in st if x.get("online") and x.get("leader", -1) >= 0)
            if online >= partitions:
                return
        except RowFailed:
            pass  # not there yet, or too busy to answer: ask again
        time.sleep(1)


def bench(ctx, cluster, deadline, mode, topic, partitions, messages, extra=()):
    """One ferry-bench run; its JSON report plus cpu figures of both sides."""
    argv = [os.path.join(ctx.bin, "ferry-bench"), mode, "--broker", cluster.brokers,
            "--topic", topic, "--messages", str(messages), "--size", str(SIZE),
            "--acks", "all", "--partitions", str(partitions),
            "--replication-factor", str(len(cluster.nodes)),
            "--timeout", str(left_ms(deadline - 5, 60_000)), "--json"] + TLS["client"] + list(extra)
    if mode == "produce":
        argv += ["--keys", str(KEYS)]
    cpu0, busy0 = cluster.cpu(), machine_busy_seconds()
    r = run(argv, deadline, f"ferry-bench {mode}")
    busy = machine_busy_seconds() - busy0
    cluster.check_alive()
    ferryd_cpu = cluster.cpu() - cpu0
    report = last_json(r["out"])
    if report is None or mode not in report:
        raise RowFailed(f"ferry-bench {mode} failed (exit {r['rc']}) after "
                        f"{r['seconds']:.1f} s:\n    " + tail_text(r["out"] + r["err"], 10))
    res = report[mode]
    out = dict(msgs_per_sec=res.get("msgs_per_sec"), messages_ok=res.get("messages"),
               failed=res.get("failed", 0), seconds=res.get("seconds"),
               ferryd_cpu_s=round(ferryd_cpu, 2), bench_cpu_s=round(r["cpu_s"], 2),
               bench_wall_s=round(r["seconds"], 2),
               # the rest of the machine's CPU in that time: other work, kernel threads
               other_cpu_s=round(max(0.0, busy - ferryd_cpu - r["cpu_s"]), 2),
               bench_rc=r["rc"])
    lat = res.get("latency_ms")
    if lat:
        out.update(p50_ms=lat.get("p50"), p99_ms=lat.get("p99"), max_ms=lat.get("max"))
    if out["failed"] or r["rc"] != 0:
        out["error"] = (f"ferry-bench exit {r['rc']}, {out['failed']} messages failed: "
                        + tail_text(r["err"], 3))
    return out


# -- the row kinds -------------------------------------------------------------------------

def row_produce(ctx, row, cluster, deadline):
    topic = "scale"
    parts, msgs = row["p"], row["m"]
    res = {}
    create_topic(ctx, cluster, deadline, topic, parts, res)
    extra = ["--rate", str(row["rate"])] if row.get("rate") else []
    res.update(bench(ctx, cluster, deadline, "produce", topic, parts, msgs, extra))
    res["nodes"] = cluster.figures()
    return res


def row_consume(ctx, row, cluster, deadline):
    topic = "scale"
    parts, msgs = row["p"], row["m"]
    res = {}
    create_topic(ctx, cluster, deadline, topic, parts, res)
    fill = bench(ctx, cluster, deadline, "produce", topic, parts, msgs)
    if fill.get("error") or fill["messages_ok"] != msgs:
        raise RowFailed(f"filling the topic: {fill.get('error', fill)}")
    res["fill"] = fill
    res.update(bench(ctx, cluster, deadline, "consume", topic, parts, msgs))
    res["nodes"] = cluster.figures()
    return res


def row_idle(ctx, row, cluster, deadline):
    topic = "idle"
    parts = row["p"]
    node = cluster.nodes[0]
    empty = proc_figures(node.pid())
    res = dict(empty_rss_kb=empty["rss_kb"])
    create_topic(ctx, cluster, deadline, topic, parts, res)
    time.sleep(SETTLE_SECONDS)
    cluster.check_alive()
    # idle CPU: ticks over IDLE_SECONDS of wall time
    c0, t0 = cpu_seconds(node.pid()), time.monotonic()
    time.sleep(IDLE_SECONDS)
    cluster.check_alive()
    c1, t1 = cpu_seconds(node.pid()), time.monotonic()
    fig = proc_figures(node.pid())
    res.update(fig)
    res["idle_cpu_pct"] = round(100.0 * (c1 - c0) / (t1 - t0), 2)
    res["rss_per_replica_kb"] = round((fig["rss_kb"] - empty["rss_kb"]) / parts, 1)
    # restart: SIGTERM, start again on the same port and data dir
    t = time.monotonic()
    how = node.stop(35)
    res["shutdown_s"] = round(time.monotonic() - t, 2)
    if how != "SIGTERM":
        res["shutdown_note"] = how
    node.start()
    cluster.wait_listening(deadline, [node])
    res["restart_listening_s"] = round(time.monotonic() - node.started_at, 2)
    # serving: a produce of 1,000 messages with 1,000 keys (many partitions)
    # succeeds; tried again until the row's bound
    attempts = 0
    while True:
        attempts += 1
        argv = [os.path.join(ctx.bin, "ferry-bench"), "produce", "--broker", cluster.brokers,
                "--topic", topic, "--messages", "1000", "--keys", "1000", "--acks", "all",
                "--timeout", str(left_ms(deadline - 5, 60_000)), "--json"] + TLS["client"]
        r = run(argv, deadline, "ferry-bench produce after the restart")
        cluster.check_alive()
        rep = last_json(r["out"])
        if r["rc"] == 0 and rep and rep.get("produce", {}).get("messages") == 1000:
            break
        if time.monotonic() > deadline - 10:
            raise RowFailed(f"produce after the restart failed {attempts} times, last (exit "
                            f"{r['rc']}):\n    " + tail_text(r["out"] + r["err"], 10))
        time.sleep(0.5)
    res["restart_produce_attempts"] = attempts
    res["restart_serving_s"] = round(time.monotonic() - node.started_at, 2)
    res["after_restart"] = proc_figures(node.pid())
    return res


def topic_dirs(node, topic):
    """Directories of `topic`'s partitions in a node's data dir: topics/T-N,
    and trash/T-N.<n> (deleted, files not removed yet)."""
    prefix = topic + "-"
    n = 0
    for sub, in_trash in (("topics", False), ("trash", True)):
        try:
            names = os.listdir(os.path.join(node.data_dir, sub))
        except OSError:
            continue
        for x in names:
            if not x.startswith(prefix):
                continue
            rest = x[len(prefix):]
            if in_trash:
                part, dot, num = rest.partition(".")
                n += part.isdigit() and dot == "." and num.isdigit()
            else:
                n += rest.isdigit()
    return n


def row_create_delete(ctx, row, cluster, deadline):
    topic = "bulk"
    parts = row["p"]
    node = cluster.nodes[0]
    res = {}
    create_topic(ctx, cluster, deadline, topic, parts, res)
    res["dirs_after_create"] = topic_dirs(node, topic)
    res.update(proc_figures(node.pid()))
    r = ferryctl(ctx, cluster, deadline, "topic", "delete", topic)
    res["delete_s"] = round(r["seconds"], 2)
    t0 = time.monotonic()
    # Deletion may go on in the background: wait (bounded) for the dirs to go.
    wait_until = min(deadline - 2, t0 + 90)
    while topic_dirs(node, topic) > 0 and time.monotonic() < wait_until:
        cluster.check_alive()
        time.sleep(0.2)
    left = topic_dirs(node, topic)
    res["dirs_left"] = left
    res["dirs_gone_s"] = round(time.monotonic() - t0, 2) if left == 0 else None
    r = ferryctl(ctx, cluster, deadline, "--json", "topic", "list")
    listed = parse_json(r["out"])
    res["still_listed"] = any(t.get("name") == topic for t in listed or [])
    return res


KINDS = dict(produce=row_produce, consume=row_consume, idle=row_idle,
             create_delete=row_create_delete)


def setup_label(row):
    n, p = row["nodes"], row["p"]
    where = "1 node" if n == 1 else f"{n} nodes RF={n}"
    if row.get("tls"):
        where += " TLS + auth" if AUTH[0] else " TLS"
    if row["kind"] == "produce" and row.get("rate"):
        return f"{where}, {p:,} partitions, paced {row['rate']:,} msgs/s"
    if row["kind"] == "produce":
        return f"{where}, {p:,} partitions"
    if row["kind"] == "consume":
        return f"{where}, consume {p:,} partitions from the start"
    if row["kind"] == "idle":
        return f"idle node, {p:,} partition replicas"
    return f"create + delete a {p:,}-partition topic"


def run_row(ctx, row):
    """Runs one row on its own fresh node(s); returns its result dict."""
    res = dict(id=row["id"], setup=setup_label(row), kind=row["kind"], nodes_n=row["nodes"],
               partitions=row["p"], messages=row.get("m"))
    work = tempfile.mkdtemp(prefix=f"ferry-scale-{row['id']}-", dir=ctx.tmp)
    set_tls(ctx.certs if row.get("tls") else None, AUTH[0])
    deadline = time.monotonic() + ctx.row_timeout
    t0 = time.monotonic()
    cluster = None
    try:
        cluster = Cluster(ctx.bin, work, row["nodes"])
        cluster.start(deadline)
        res["start_s"] = round(time.monotonic() - t0, 2)
        res.update(KINDS[row["kind"]](ctx, row, cluster, deadline))
        res["ok"] = "error" not in res
    except RowFailed as e:
        res["ok"] = False
        res["error"] = str(e)
        if cluster:
            res["logs"] = cluster.logs()
            if cluster.hit_fd_limit():
                res["error"] = "(ferryd hit the open-file limit) " + res["error"]
    except Exception:  # a bug of this script or an OSError: report it, go on
        res["ok"] = False
        res["error"] = "scale_table.py error:\n" + traceback.format_exc()
        if cluster:
            res["logs"] = cluster.logs()
    finally:
        if cluster:
            notes = cluster.stop()
            if notes:
                res["stop_notes"] = notes
        if ctx.keep:
            res["work_dir"] = work
        else:
            shutil.rmtree(work, ignore_errors=True)
        res["row_s"] = round(time.monotonic() - t0, 1)  # with the stop and the cleanup
    return res


# -- printing --------------------------------------------------------------------------

def fmt_rate(x):
    if x is None:
        return "-"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def fmt_ms(x):
    if x is None:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:.2f}" if x < 10 else f"{x:.1f}"


def fmt_mb(kb):
    return "-" if kb is None else f"{kb / 1024:,.0f} MB"


def fmt_int(x):
    return "-" if x is None else f"{x:,}"


def table(header, rows):
    """A markdown table with padded columns."""
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
                     + [line(r) for r in rows])


def short_error(res):
    first = res.get("error", "").strip().splitlines()
    text = first[0] if first else "?"
    return "FAILED: " + (text[:60] + "..." if len(text) > 60 else text)


def print_report(env, results):
    print(f"Ferry scale table: {env['date']}, commit {env['commit']}, {env['mode']} run")
    print(f"bin {env['bin']} (ferryd built {env['ferryd_mtime']}), {env['cores']} cores, "
          f"open-file limit {env['nofile']}, load {env['load']}")
    if FERRYD_EXTRA:
        print("ferryd " + " ".join(FERRYD_EXTRA))
    print(f"one producer, {SIZE} B, acks=all, {KEYS:,} distinct keys; node figures at the end "
          "of the run (3 nodes: the largest node); CPU s = ferryd (all nodes) + ferry-bench")
    print()
    flow = [r for r in results if r["kind"] in ("produce", "consume")]
    if flow:
        rows = []
        for r in flow:
            if not r["ok"] and "msgs_per_sec" not in r:
                rows.append([r["setup"], short_error(r), "", "", "", "", "", ""])
                continue
            nodes = r.get("nodes") or [{}]
            big = lambda k: max((x.get(k) or 0) for x in nodes) or None
            rate = fmt_rate(r.get("msgs_per_sec"))
            if r["kind"] == "produce" and r.get("failed"):
                rate += f" ({r['failed']:,} failed)"
            rows.append([r["setup"], rate, fmt_ms(r.get("p99_ms")), fmt_mb(big("rss_kb")),
                         fmt_int(big("threads")), fmt_int(big("open_files")),
                         f"{r['ferryd_cpu_s']:.1f} + {r['bench_cpu_s']:.1f}",
                         f"{r['other_cpu_s']:.1f} / {r['bench_wall_s'] * env['cores']:.1f}"])
        print(table(["setup", "msgs/s", "p99 ms", "node RSS", "threads", "open files", "CPU s",
                     "others' CPU s"], rows))
        print(f"(others' CPU s: what other processes and kernel threads used during the run, of "
              f"ferry-bench's wall seconds x {env['cores']} cores: more than a little means the figures "
              "were measured on a shared CPU)")
        print()
    idle = [r for r in results if r["kind"] == "idle"]
    if idle:
        rows = []
        for r in idle:
            if not r["ok"]:
                rows.append([r["setup"], short_error(r), "", "", "", "", "", ""])
                continue
            rows.append([r["setup"], fmt_mb(r["rss_kb"]), f"{r['rss_per_replica_kb']:,.1f} KB",
                         fmt_int(r["threads"]), fmt_int(r["open_files"]),
                         f"{r['idle_cpu_pct']:.1f}%", f"{r['shutdown_s']:.1f}",
                         f"{r['restart_listening_s']:.1f} / {r['restart_serving_s']:.1f}"])
        print(table(["setup", "node RSS", "RSS/replica", "threads", "open files",
                     f"idle CPU ({IDLE_SECONDS:.0f} s)", "stop s",
                     "restart s: listening / serving"], rows))
        print("(RSS/replica: RSS above the same node while empty, divided by the replicas; "
              "idle CPU in % of one core)")
        print()
    admin = [r for r in results if r["kind"] == "create_delete"]
    if admin:
        rows = []
        for r in admin:
            if not r["ok"]:
                rows.append([r["setup"], short_error(r), "", "", "", ""])
                continue
            left = ("nothing" + (f" (after {r['dirs_gone_s']:.1f} s)" if r["dirs_gone_s"] is not None else "")
                    if r["dirs_left"] == 0 else f"{r['dirs_left']:,} partition dirs")
            if r["still_listed"]:
                left += "; still listed"
            rows.append([r["setup"], f"{r['create_answered_s']:.1f} / {r['create_s']:.1f}",
                         f"{r['delete_s']:.1f}", left,
                         fmt_int(r["threads"]), fmt_int(r["open_files"])])
        print(table(["setup", "create s: answered / all logs open", "delete s", "left in the data dir",
                     "threads after create", "open files after create"], rows))
        print()
    failed = [r for r in results if r.get("error")]
    if failed:
        print("What failed:")
        for r in failed:
            print(f"- {r['id']} ({r['setup']}), after {r['row_s']} s:")
            print("    " + r["error"].replace("\n", "\n    "))
            if r.get("logs"):
                print("  " + r["logs"].replace("\n", "\n  "))
        print()
    notes = [(r["id"], n) for r in results for n in r.get("stop_notes", [])]
    notes += [(r["id"], r["shutdown_note"]) for r in results if r.get("shutdown_note")]
    notes += [(r["id"], r["create_note"]) for r in results if r.get("create_note")]
    for rid, n in notes:
        print(f"note: {rid}: {n}")
    print(f"total {env['total_s']:.0f} s")


def environment(args):
    def git(*a):
        try:
            return subprocess.run(["git", "-C", REPO] + list(a), capture_output=True,
                                  text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return "?"
    try:
        mtime = time.strftime("%Y-%m-%d %H:%M UTC",
                              time.gmtime(os.path.getmtime(os.path.join(args.bin, "ferryd"))))
    except OSError:
        mtime = "?"
    return dict(date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                commit=git("rev-parse", "--short", "HEAD")
                + (" + uncommitted changes" if git("status", "--porcelain", "-uno") else ""),
                bin=args.bin, ferryd_mtime=mtime, cores=os.cpu_count(),
                nofile=resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                load=" ".join(f"{x:.2f}" for x in os.getloadavg()),
                mode="--quick" if args.quick else "full")


# -- main ------------------------------------------------------------------------------

def select_rows(spec, quick, tls="off"):
    chosen = []
    for row in ROWS:
        if spec:
            wanted = [s.strip() for s in spec.split(",") if s.strip()]
            if not any(row["id"] == w or row["id"].startswith(w + "-") for w in wanted):
                continue
        r = dict(row)
        i = 1 if quick else 0
        r["p"] = row["partitions"][i]
        if "messages" in row:
            r["m"] = row["messages"][i]
        if tls in ("off", "both"):
            chosen.append(r)
        if tls in ("on", "both"):
            t = dict(r, id=r["id"] + "+tls", tls=True)
            chosen.append(t)
    return chosen


def on_signal(signum, frame):
    raise Interrupted(signal.Signals(signum).name)


# Extra ferryd arguments for every node (--ferryd-arg).
FERRYD_EXTRA = []
# --auth: TLS rows also run with users (set_tls()).
AUTH = [False]
# --tls-* arguments of the row that runs (set_tls()).
TLS = {"node": [], "client": [], "peer": None}


def make_certs(folder):
    """A CA, a node certificate and a client certificate (openssl, EC P-256)."""
    def ossl(*a):
        subprocess.run(["openssl"] + list(a), check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    f = lambda name: os.path.join(folder, name)
    ossl("req", "-x509", *ec, "-keyout", f("ca.key"), "-out", f("ca.pem"), "-days", "2",
         "-subj", "/CN=scale-table-ca")
    with open(f("san.ext"), "w") as out:
        out.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("node", "client"):
        ossl("req", *ec, "-keyout", f(name + ".key"), "-out", f(name + ".csr"),
             "-subj", "/CN=" + name)
        ossl("x509", "-req", "-in", f(name + ".csr"), "-CA", f("ca.pem"), "-CAkey", f("ca.key"),
             "-CAcreateserial", "-out", f(name + ".pem"), "-days", "2", "-extfile", f("san.ext"))
    return folder


def set_tls(folder, auth=False):
    """TLS arguments for the next row's ferryd, ferryctl and ferry-bench (None: off);
    with auth, also --auth scram on the nodes and the operator's login on the clients
    (every request then travels in a session envelope)."""
    if not folder:
        TLS["node"], TLS["client"], TLS["peer"] = [], [], None
        return
    f = lambda name: os.path.join(folder, name)
    TLS["node"] = ["--tls-cert", f("node.pem"), "--tls-key", f("node.key"), "--tls-ca", f("ca.pem")]
    TLS["client"] = ["--tls-cert", f("client.pem"), "--tls-key", f("client.key"),
                     "--tls-ca", f("ca.pem")]
    if auth:
        secret = f("cluster.secret")
        if not os.path.exists(secret):
            with open(secret, "w") as out:
                out.write(os.urandom(32).hex() + "\n")
        TLS["node"] += ["--auth", "scram", "--cluster-secret-file", secret]
        # Peers with the same CA's certificate (a benchmark: one CA will do).
        TLS["peer"] = ["--peer-tls-ca", f("ca.pem")]
        TLS["client"] += ["--cluster-secret-file", secret]
    else:
        TLS["peer"] = None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="rows: " + ", ".join(r["id"] for r in ROWS))
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin"),
                    help="folder with ferryd, ferryctl, ferry-bench (default: %(default)s)")
    ap.add_argument("--quick", action="store_true",
                    help="small message and partition counts: a smoke run of ~1 minute")
    ap.add_argument("--rows", default="",
                    help="comma-separated row ids or prefixes (1n, 3n, idle, ...); default all")
    ap.add_argument("--list", action="store_true", help="print the row ids and exit")
    ap.add_argument("--paced-rates", default="",
                    help="comma-separated msgs/s: adds a row 3n-300-rate-R per rate "
                         "(the paced row at that rate, 10 s of messages; --quick: 1 s)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    ap.add_argument("--row-timeout", type=float, default=None,
                    help="seconds one row may take in all (default 180, --quick 60)")
    ap.add_argument("--create-timeout", type=float, default=60.0,
                    help="seconds a topic create may take (ferryctl --request-timeout; default 60)")
    ap.add_argument("--tmp", default=tempfile.gettempdir(),
                    help="where the nodes' data dirs go (default: %(default)s)")
    ap.add_argument("--keep", action="store_true", help="keep the data dirs and logs")
    ap.add_argument("--ferryd-arg", action="append", default=[],
                    help="an extra ferryd argument for every node (repeatable), e.g. "
                         "--ferryd-arg=--fetch-sessions=false to compare")
    ap.add_argument("--tls", choices=("off", "on", "both"), default="off",
                    help="mutual TLS on every node and client (certificates made with openssl "
                         "in a temp dir); both: each row plaintext, then with TLS (row id +tls)")
    ap.add_argument("--auth", action="store_true",
                    help="with --tls: the TLS rows also run the nodes with --auth scram and "
                         "the clients logged in (as the operator): the cost of sessions")
    args = ap.parse_args()
    FERRYD_EXTRA.extend(args.ferryd_arg)
    AUTH[0] = args.auth
    for text in filter(None, (t.strip() for t in args.paced_rates.split(","))):
        try:
            rate = int(text)
        except ValueError:
            rate = 0
        if rate <= 0:
            print(f"scale_table: --paced-rates: {text!r} is not a positive number", file=sys.stderr)
            return 2
        ROWS.append(dict(id=f"3n-300-rate-{rate}", kind="produce", nodes=3, partitions=(300, 30),
                         messages=(rate * 10, rate), rate=rate))
    if args.list:
        for r in select_rows("", args.quick):
            print(f"{r['id']:22} {setup_label(r)}" + (f", {r['m']:,} messages" if "m" in r else ""))
        return 0
    args.bin = os.path.abspath(args.bin)
    for prog in ("ferryd", "ferryctl", "ferry-bench"):
        if not os.access(os.path.join(args.bin, prog), os.X_OK):
            print(f"scale_table: no {prog} in {args.bin} (--bin DIR)", file=sys.stderr)
            return 2
    if args.row_timeout is None:
        args.row_timeout = 60.0 if args.quick else 180.0
    rows = select_rows(args.rows, args.quick, args.tls)
    args.certs = None
    if args.tls != "off":
        args.certs = make_certs(tempfile.mkdtemp(prefix="ferry-scale-certs-", dir=args.tmp))
    if not rows:
        print(f"scale_table: no row matches --rows {args.rows!r} (see --list)", file=sys.stderr)
        return 2

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    env = environment(args)
    results = []
    t0 = time.monotonic()
    interrupted = None
    try:
        for row in rows:
            log(f"== {row['id']}: {setup_label(row)}"
                + (f", {row['m']:,} messages" if "m" in row else ""))
            res = run_row(args, row)
            results.append(res)
            log(f"   {'ok' if res['ok'] else 'FAILED'} in {res['row_s']} s"
                + (f": {res['error'].splitlines()[0]}" if res.get("error") else ""))
    except (KeyboardInterrupt, Interrupted) as e:
        interrupted = str(e) or "Ctrl-C"
        log(f"scale_table: interrupted ({interrupted}); stopping what runs")
    finally:
        # Whatever is still running (an interrupted row): SIGTERM, then SIGKILL.
        for p in list(LIVE):
            try:
                stop_process(p, 10)
            except (OSError, subprocess.SubprocessError):
                pass
        if args.certs:
            shutil.rmtree(args.certs, ignore_errors=True)
    env["total_s"] = time.monotonic() - t0
    if interrupted:
        env["interrupted"] = interrupted
    if args.json:
        print(json.dumps(dict(env=env, rows=results), indent=1))
    else:
        print_report(env, results)
        if interrupted:
            print(f"(interrupted: {interrupted}; rows not run are missing)")
    if interrupted:
        return 130
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
