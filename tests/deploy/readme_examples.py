#!/usr/bin/env python3
"""Runs the README's shell examples as written, against a real ferryd.

    readme_examples.py --readme README.md --bin BUILD/bin --section "Try it" ...

For each named section (a "## " heading of the README) every ```sh block is
run one command line at a time, in order, the way a user would paste them,
against a ferryd this script starts on free 127.0.0.1 ports in a temp dir
(and always stops). What differs from the user's shell is only where things
are: `./build/bin/` is the build folder given with --bin, and the documented
default ports (CAF 9092, HTTP 8080, metrics 9464) are rewritten to the ports
the node picked (ferryctl gets FERRY_BROKER).

Checks: every command exits 0 (a pipeline ending in grep therefore checks
that its pattern printed something), and a trailing comment that shows an
error JSON (`# {"error":{"code":"unknown_topic",...}}`) must match the
output's error code. A line may end with `# expect: TEXT` to require TEXT in
its output. Exit status 0 when every command passed.
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def sections(readme, names):
    """Yields (section, command line) for the sh blocks of the named sections."""
    current = None
    in_block = False
    for raw in readme.splitlines():
        if not in_block and raw.startswith("## "):
            current = raw[3:].strip()
            continue
        if raw.startswith("```"):
            if in_block:
                in_block = False
            elif raw.strip() in ("```sh", "```bash") and current in names:
                in_block = True
            continue
        if in_block:
            line = raw.strip()
            if line and not line.startswith("#"):
                yield current, line


def start_ferryd(bin_dir, work):
    log_path = os.path.join(work, "ferryd.log")
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [os.path.join(bin_dir, "ferryd"), "--data-dir", os.path.join(work, "data"),
         "--host", "127.0.0.1", "--port", "0", "--metrics-port", "0",
         "--http-port", "0"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    ports = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(ports) < 3:
        if proc.poll() is not None:
            break
        with open(log_path) as f:
            for line in f:
                m = re.match(r"^(listening|metrics|http) on [0-9.]+:(\d+)\s*$", line)
                if m:
                    ports[m.group(1)] = m.group(2)
        time.sleep(0.1)
    if len(ports) < 3:
        stop(proc)
        with open(log_path) as f:
            sys.stderr.write(f.read())
        raise SystemExit("readme_examples: ferryd did not start")
    return proc, ports


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def rewrite(line, ports):
    line = line.replace("localhost:8080", "127.0.0.1:" + ports["http"])
    line = line.replace("localhost:9464", "127.0.0.1:" + ports["metrics"])
    line = line.replace("127.0.0.1:9092", "127.0.0.1:" + ports["listening"])
    line = line.replace("localhost:9092", "127.0.0.1:" + ports["listening"])
    return line


def expectation(line):
    """What the line's trailing comment requires of its output, if anything."""
    m = re.search(r"#\s*expect:\s*(.+)$", line)
    if m:
        return m.group(1).strip()
    m = re.search(r'#\s*\{"error":\{"code":"([a-z_]+)"', line)
    if m:
        return '"code":"%s"' % m.group(1)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--readme", required=True)
    ap.add_argument("--bin", required=True, help="folder with ferryd and ferryctl")
    ap.add_argument("--section", action="append", required=True)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per command")
    args = ap.parse_args()

    with open(args.readme) as f:
        commands = list(sections(f.read(), set(args.section)))
    if not commands:
        raise SystemExit("readme_examples: no sh commands in sections %s" % args.section)

    work = tempfile.mkdtemp(prefix="ferry-readme.")
    proc = None
    failures = 0
    try:
        # The README's commands say ./build/bin/...: give them that path.
        os.makedirs(os.path.join(work, "build"))
        os.symlink(os.path.abspath(args.bin), os.path.join(work, "build", "bin"))
        proc, ports = start_ferryd(os.path.abspath(args.bin), work)
        env = dict(os.environ, FERRY_BROKER="127.0.0.1:" + ports["listening"])
        for section, line in commands:
            cmd = rewrite(line, ports)
            try:
                r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=work, env=env,
                                   capture_output=True, text=True, timeout=args.timeout)
                out, rc = r.stdout + r.stderr, r.returncode
            except subprocess.TimeoutExpired as e:
                out, rc = "timed out after %.0f s" % args.timeout, -1
            want = expectation(line)
            ok = rc == 0 and (want is None or want in out)
            print("%s [%s] %s" % ("ok  " if ok else "FAIL", section, line))
            shown = out.strip()
            if shown:
                print("     " + shown[:600].replace("\n", "\n     "))
            if not ok:
                failures += 1
                print("     exit %d%s" % (rc, "" if want is None else ", wanted " + want))
    finally:
        if proc is not None:
            stop(proc)
            if failures:
                with open(os.path.join(work, "ferryd.log")) as f:
                    print("--- ferryd.log ---\n" + f.read()[-4000:])
        shutil.rmtree(work, ignore_errors=True)
    print("%d of %d README commands passed" % (len(commands) - failures, len(commands)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
