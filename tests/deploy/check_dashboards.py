#!/usr/bin/env python3
"""Checks Ferry's Grafana dashboards (and the alert rules' metric names).

  check_dashboards.py --readme metrics/README.md [--rules alerts.yml]
                      [--prometheus prometheus] DASHBOARD.json...

1. Each dashboard is importable Grafana 10 JSON: schemaVersion, uid, title,
   a DS_PROMETHEUS input, panels on the 24-column grid without overlaps,
   unique panel ids, every panel and target on the Prometheus data source
   variable, every target with an expr, every variable it uses defined,
   multi-value variables only in regex matchers (=~ / !~).
2. Every expr (and every label_values() variable query) names only ferry_
   metrics of the table in metrics/README.md (histograms: _bucket, _sum,
   _count), and its matchers and by/without clauses only labels those
   metrics have (plus job, instance, le).
3. A real Prometheus (started here on a free 127.0.0.1 port with a
   temporary TSDB, stopped at the end) parses every expr, Grafana variables
   replaced with concrete values: /api/v1/query must not answer an error.
   With --rules it also loads that rule file and checks its rules' exprs
   against the README as in 2.

Exit 0 when all is well, 1 with one line per problem otherwise.
Python 3 standard library only.
"""

import argparse
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

GRID_COLUMNS = 24
MIN_SCHEMA_VERSION = 36  # Grafana 9.3; Grafana 10.0 writes 38
PANELS_WITHOUT_QUERIES = {"row", "text", "news", "dashlist", "alertlist"}
# Labels every scraped series has, and the histogram bucket label.
COMMON_LABELS = {"job", "instance", "le", "__name__"}
# Values substituted for Grafana's built-in variables.
BUILTIN_VARS = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__interval_ms": "15000",
    "__range": "1h",
    "__range_s": "3600",
    "__range_ms": "3600000",
}
# Values substituted for dashboard variables, by name (else "x").
SAMPLE_VALUES = {"topic": "orders", "group": "billing", "partition": "0",
                 "instance": "127.0.0.1:9464", "job": "ferry"}
VAR_RE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)(?::\w+)?\]\]|\$(\w+)")
METRIC_RE = re.compile(r"\bferry_[a-zA-Z0-9_]*")
PROMQL_KEYWORDS_BEFORE_PAREN = ("by", "without", "on", "ignoring",
                                "group_left", "group_right")


class Problems:
    def __init__(self):
        self.items = []

    def add(self, where, what):
        self.items.append(f"{where}: {what}")


# -- metrics/README.md --------------------------------------------------------

def read_metric_table(path):
    """{metric name: set of labels} from the README's metric table."""
    metrics = {}
    row = re.compile(r"^\|\s*`(ferry_\w+)`\s*\|\s*(\w+)\s*\|\s*([^|]*)\|")
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = row.match(line)
            if not m:
                continue
            name, kind, labels = m.group(1), m.group(2), m.group(3)
            label_set = {l.strip() for l in labels.split(",")
                         if l.strip() and l.strip() != "-"}
            if kind == "histogram":
                for suffix in ("_bucket", "_sum", "_count"):
                    metrics[name + suffix] = label_set
            else:
                metrics[name] = label_set
    return metrics


# -- PromQL text checks (names and labels) -----------------------------------

def strip_strings(expr):
    """expr with the contents of string literals blanked (keeps quotes)."""
    return re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`',
                  lambda m: m.group(0)[0] + " " * (len(m.group(0)) - 2)
                  + m.group(0)[0], expr)


def check_names_and_labels(where, expr, metrics, problems):
    bare = strip_strings(expr)
    names = set(METRIC_RE.findall(bare))
    for name in sorted(names):
        if name not in metrics:
            problems.add(where, f"unknown metric {name} (not in metrics/README.md)")
    known = [n for n in names if n in metrics]
    if not known:
        return
    allowed = set(COMMON_LABELS)
    for n in known:
        allowed |= metrics[n]
    # Matchers of each ferry_ selector: name{label op "value", ...}.
    for m in re.finditer(r"\b(ferry_\w+)\s*\{([^}]*)\}", bare):
        if m.group(1) not in metrics:
            continue
        own = metrics[m.group(1)] | COMMON_LABELS
        for lm in re.finditer(r"(\w+)\s*(=~|!~|!=|=)", m.group(2)):
            if lm.group(1) not in own:
                problems.add(where, f"{m.group(1)} has no label "
                             f"'{lm.group(1)}' (labels: "
                             f"{', '.join(sorted(metrics[m.group(1)])) or '-'})")
    # Grouping clauses: by (...), without (...), on (...), ignoring (...).
    for m in re.finditer(r"\b(by|without|on|ignoring|group_left|group_right)"
                         r"\s*\(([^)]*)\)", bare):
        for label in (l.strip() for l in m.group(2).split(",")):
            if label and label not in allowed:
                problems.add(where, f"'{m.group(1)} ({label})': no metric in "
                             f"this expr has label '{label}'")


# -- Grafana JSON ------------------------------------------------------------

def walk_panels(panels):
    for p in panels:
        yield p
        yield from walk_panels(p.get("panels", []) or [])


def datasource_ok(ds, ds_vars):
    """A panel or target data source: the DS_PROMETHEUS input or a
    datasource variable, of type prometheus."""
    if ds is None:
        return False
    if isinstance(ds, str):
        uid = ds
    elif isinstance(ds, dict):
        if ds.get("type") not in (None, "prometheus"):
            return False
        uid = ds.get("uid")
    else:
        return False
    if not isinstance(uid, str):
        return False
    m = re.fullmatch(r"\$\{(\w+)\}|\$(\w+)", uid)
    if not m:
        return False
    name = m.group(1) or m.group(2)
    return name == "DS_PROMETHEUS" or name in ds_vars


def variable_query(var):
    q = var.get("query")
    if isinstance(q, dict):
        q = q.get("query")
    if not q:
        q = var.get("definition")
    return q if isinstance(q, str) else ""


def used_variables(text):
    for m in VAR_RE.finditer(text):
        yield m.group(1) or m.group(2) or m.group(3), m


def check_variable_uses(where, text, variables, problems):
    """Every variable defined; multi-value ones only inside =~ / !~."""
    for name, m in used_variables(text):
        if name in BUILTIN_VARS:
            continue
        if name not in variables:
            problems.add(where, f"uses undefined variable ${name}")
            continue
        var = variables[name]
        if var.get("multi") or var.get("includeAll"):
            before = text[:m.start()]
            if not re.search(r'(=~|!~)\s*"[^"]*$', before):
                problems.add(where, f"multi-value variable ${name} outside a "
                             "regex matcher (=~ or !~)")


def substitute(text, variables):
    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in BUILTIN_VARS:
            return BUILTIN_VARS[name]
        return SAMPLE_VALUES.get(name, "x")
    return VAR_RE.sub(repl, text)


def check_dashboard(path, metrics, problems, uids):
    """Structure checks; returns [(where, expr)] to parse with Prometheus."""
    queries = []
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        problems.add(path, f"cannot load: {e}")
        return queries
    name = os.path.basename(path)
    if not isinstance(d, dict):
        problems.add(name, "not a JSON object")
        return queries
    sv = d.get("schemaVersion")
    if not isinstance(sv, int) or sv < MIN_SCHEMA_VERSION:
        problems.add(name, f"schemaVersion {sv!r} (need an int >= {MIN_SCHEMA_VERSION})")
    uid = d.get("uid")
    if not isinstance(uid, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", uid):
        problems.add(name, f"uid {uid!r} (need 1-40 of [A-Za-z0-9_-])")
    elif uid in uids:
        problems.add(name, f"uid {uid} also used by {uids[uid]}")
    else:
        uids[uid] = name
    if not isinstance(d.get("title"), str) or not d["title"].strip():
        problems.add(name, "no title")
    if d.get("id") is not None:
        problems.add(name, "id must be null in an importable dashboard")
    inputs = d.get("__inputs", [])
    if not any(i.get("name") == "DS_PROMETHEUS" and i.get("type") == "datasource"
               and i.get("pluginId") == "prometheus" for i in inputs):
        problems.add(name, "no __inputs entry DS_PROMETHEUS (datasource, prometheus)")
    templating = d.get("templating", {}).get("list", [])
    variables = {}
    for v in templating:
        vname = v.get("name")
        if not vname or not v.get("type"):
            problems.add(name, f"template variable without name or type: {v}")
            continue
        if vname in variables:
            problems.add(name, f"template variable {vname} defined twice")
        variables[vname] = v
    ds_vars = {n for n, v in variables.items()
               if v.get("type") == "datasource" and v.get("query") == "prometheus"}
    for vname, v in variables.items():
        if v.get("type") != "query":
            continue
        where = f"{name} variable ${vname}"
        if not datasource_ok(v.get("datasource"), ds_vars):
            problems.add(where, f"datasource {v.get('datasource')!r} is not "
                         "${DS_PROMETHEUS} or a datasource variable")
        q = variable_query(v)
        m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", q)
        if not m:
            problems.add(where, f"query {q!r} is not label_values(selector, label)")
            continue
        selector, label = m.group(1), m.group(2)
        check_variable_uses(where, selector, variables, problems)
        check_names_and_labels(where, selector, metrics, problems)
        for metric in METRIC_RE.findall(strip_strings(selector)):
            if metric in metrics and label not in metrics[metric] | COMMON_LABELS:
                problems.add(where, f"{metric} has no label '{label}'")
        queries.append((where, substitute(selector, variables)))

    panels = d.get("panels")
    if not isinstance(panels, list) or not panels:
        problems.add(name, "no panels")
        return queries
    ids = set()
    cells = {}
    for p in walk_panels(panels):
        ptype = p.get("type")
        title = p.get("title", "")
        where = f"{name} panel {p.get('id')} '{title}'"
        if not isinstance(p.get("id"), int) or p["id"] in ids:
            problems.add(where, "missing or duplicate panel id")
        ids.add(p.get("id"))
        if not ptype:
            problems.add(where, "no type")
        g = p.get("gridPos", {})
        if not all(isinstance(g.get(k), int) for k in ("h", "w", "x", "y")) \
                or g["w"] < 1 or g["h"] < 1 or g["x"] < 0 or g["y"] < 0 \
                or g["x"] + g["w"] > GRID_COLUMNS:
            problems.add(where, f"bad gridPos {g}")
        else:
            for yy in range(g["y"], g["y"] + g["h"]):
                for xx in range(g["x"], g["x"] + g["w"]):
                    if (xx, yy) in cells:
                        problems.add(where, f"overlaps panel {cells[(xx, yy)]}")
                        break
                    cells[(xx, yy)] = p.get("id")
                else:
                    continue
                break
        if ptype in PANELS_WITHOUT_QUERIES:
            continue
        if not title.strip():
            problems.add(where, "no title")
        if not datasource_ok(p.get("datasource"), ds_vars):
            problems.add(where, f"datasource {p.get('datasource')!r} is not "
                         "${DS_PROMETHEUS} or a datasource variable")
        targets = p.get("targets") or []
        if not targets:
            problems.add(where, "no targets")
        refids = set()
        for t in targets:
            twhere = f"{where} target {t.get('refId')}"
            if not t.get("refId") or t["refId"] in refids:
                problems.add(twhere, "missing or duplicate refId")
            refids.add(t.get("refId"))
            if "datasource" in t and not datasource_ok(t["datasource"], ds_vars):
                problems.add(twhere, f"datasource {t['datasource']!r} is not "
                             "${DS_PROMETHEUS} or a datasource variable")
            expr = t.get("expr")
            if not isinstance(expr, str) or not expr.strip():
                problems.add(twhere, "no expr")
                continue
            check_variable_uses(twhere, expr, variables, problems)
            check_names_and_labels(twhere, expr, metrics, problems)
            queries.append((twhere, substitute(expr, variables)))
    return queries


# -- Prometheus -----------------------------------------------------------------

def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent():
    """In the child: SIGTERM when this script dies (even by SIGKILL)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def http_get(url, timeout=10):
    """(status, parsed JSON or text) of a GET; HTTP errors are answers too."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            body, status = r.read(), r.status
    except urllib.error.HTTPError as e:
        body, status = e.read(), e.code
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode("utf-8", "replace")


class Prometheus:
    """A throwaway Prometheus on 127.0.0.1 with a temporary TSDB."""

    def __init__(self, binary, rules):
        self.binary = binary
        self.rules = rules
        self.proc = None
        self.dir = tempfile.mkdtemp(prefix="ferry-check-dashboards-")
        self.base = None

    def start(self):
        config = os.path.join(self.dir, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 5s\n  evaluation_interval: 5s\n")
            if self.rules:
                f.write(f"rule_files:\n  - {json.dumps(os.path.abspath(self.rules))}\n")
        log_path = os.path.join(self.dir, "prometheus.log")
        for _ in range(5):
            port = free_port()
            self.base = f"http://127.0.0.1:{port}"
            log = open(log_path, "wb")
            self.proc = subprocess.Popen(
                [self.binary, f"--config.file={config}",
                 f"--storage.tsdb.path={os.path.join(self.dir, 'tsdb')}",
                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent)
            log.close()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    status, _ = http_get(self.base + "/-/ready", timeout=1)
                    if status == 200:
                        return
                except OSError:
                    pass
                time.sleep(0.05)
            self.stop()
            # Port taken between free_port() and bind: try another one.
        with open(log_path, encoding="utf-8", errors="replace") as f:
            raise RuntimeError("prometheus did not become ready:\n" + f.read()[-2000:])

    def query(self, expr):
        """None if Prometheus accepts expr, else its error."""
        url = self.base + "/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr, "time": f"{time.time():.3f}"})
        status, body = http_get(url)
        if status == 200 and isinstance(body, dict) and body.get("status") == "success":
            return None
        if isinstance(body, dict):
            return f"HTTP {status} {body.get('errorType')}: {body.get('error')}"
        return f"HTTP {status}: {body!r}"

    def rule_queries(self):
        status, body = http_get(self.base + "/api/v1/rules")
        if status != 200 or body.get("status") != "success":
            raise RuntimeError(f"/api/v1/rules: HTTP {status} {body}")
        out = []
        for group in body["data"]["groups"]:
            for rule in group["rules"]:
                out.append((f"rule {group['name']}/{rule.get('name')}", rule["query"]))
        return out

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--readme", required=True, help="metrics/README.md")
    ap.add_argument("--rules", help="a Prometheus rule file to check too")
    ap.add_argument("--prometheus", default="prometheus", help="prometheus binary")
    ap.add_argument("dashboards", nargs="+")
    args = ap.parse_args()

    # ctest (or a user) stopping us must still stop Prometheus.
    def on_signal(sig, _frame):
        raise SystemExit(128 + sig)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    problems = Problems()
    metrics = read_metric_table(args.readme)
    if not metrics:
        print(f"no ferry_ metrics found in {args.readme}", file=sys.stderr)
        return 1
    uids = {}
    queries = []
    for path in args.dashboards:
        queries += check_dashboard(path, metrics, problems, uids)

    if shutil.which(args.prometheus) is None:
        problems.add("prometheus", f"{args.prometheus} not found (Debian package prometheus)")
    else:
        prom = Prometheus(args.prometheus, args.rules)
        try:
            prom.start()
            for where, expr in queries:
                err = prom.query(expr)
                if err:
                    problems.add(where, f"{err}\n    query: {expr}")
            if args.rules:
                rules = prom.rule_queries()
                if not rules:
                    problems.add(args.rules, "Prometheus loaded no rules from it")
                for where, expr in rules:
                    check_names_and_labels(where, expr, metrics, problems)
        except RuntimeError as e:
            problems.add("prometheus", str(e))
        finally:
            prom.cleanup()

    for p in problems.items:
        print("FAIL", p)
    n_rules = " and the rules" if args.rules else ""
    if problems.items:
        print(f"{len(problems.items)} problem(s) in {len(queries)} queries "
              f"of {len(args.dashboards)} dashboard(s){n_rules}")
        return 1
    print(f"OK: {len(queries)} queries of {len(args.dashboards)} dashboard(s){n_rules}: "
          "importable, known metric names and labels, parsed by Prometheus")
    return 0


if __name__ == "__main__":
    sys.exit(main())
