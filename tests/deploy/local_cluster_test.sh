#!/usr/bin/env bash
# Runs deploy/local-cluster.sh the way a user would, against built binaries:
#
#   local_cluster_test.sh --bin BUILD/bin [--script deploy/local-cluster.sh] [--nodes N] [--tls [--auth]]
#
# start 3 -> status -> ferryctl topic create (RF 3) with no --broker, from the
# folder that holds ./ferry-cluster (so ferryctl's default finds the cluster)
# -> produce and consume a few messages -> kill 2 -> status shows node 2 down
# -> restart 2 -> status shows all up, the messages are still there; with 3
# nodes also: partition reassign, then `add` (broker-only node 4), a reassign
# onto it, `remove 4` (its replica moves back to the voters), `remove 1`
# refused (a voter) -> stop.
# The cluster lives in a temp dir on a random free port range (base in
# 10000 up to the kernel's ephemeral port range) and is always stopped on the way out, also on failure (then
# the nodes' logs are printed). --nodes N (default 3) runs the same with N
# nodes, RF min(N, 3), killing node 2 (node 1 when N = 1). --tls starts the
# cluster with `start N --tls` and runs it all over mutual TLS; ferryctl still
# runs without flags (the cluster's client certificate comes with its brokers
# file), and a client without a certificate, plaintext or curl, is refused.
#
# Exit status: 0 passed, 1 failed, 77 skipped (ferryd has no --voters yet:
# ctest's SKIP_RETURN_CODE). FERRY_TEST_KEEP=1 keeps the temp dir.

set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=
script=$here/../../deploy/local-cluster.sh
nodes=3
tls=
auth=
usage="usage: $0 --bin BUILD/bin [--script local-cluster.sh] [--nodes N] [--tls [--auth]]"
while (($# > 0)); do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    --script) script=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --tls) tls=--tls; shift ;;
    --auth) auth=--auth; shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
[[ -n $bin && $nodes =~ ^[1-9]$ ]] || { echo "$usage" >&2; exit 2; }
[[ -z $auth || -n $tls ]] || { echo "$usage (--auth needs --tls)" >&2; exit 2; }
rf=$((nodes >= 3 ? 3 : nodes))
victim=$((nodes >= 2 ? 2 : 1))
bin=$(cd "$bin" && pwd)
script=$(cd "$(dirname "$script")" && pwd)/$(basename "$script")
ferryctl=$bin/ferryctl
for f in "$bin/ferryd" "$ferryctl" "$script"; do
  [[ -x $f ]] || { echo "FAIL: $f is missing or not executable" >&2; exit 1; }
done
if ! "$bin/ferryd" --help 2>&1 | grep -e '--voters' >/dev/null; then
  echo "SKIP: $bin/ferryd has no --voters option (no cluster mode yet)"
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-local-cluster-test.XXXXXX")
export FERRY_BUILD_DIR=$bin
export FERRY_CLUSTER_DIR=$work/ferry-cluster
export FERRY_CLUSTER_START_TIMEOUT=60
export FERRY_CLUSTER_STOP_TIMEOUT=30
unset FERRY_BROKER

step() { echo "== $*"; }
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Every port of the range must be bindable now (nothing listening or bound).
ports_free() {
  python3 - "$@" <<'EOF'
import socket, sys
for p in sys.argv[1:]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", int(p)))
    except OSError:
        sys.exit(1)
    finally:
        s.close()
EOF
}

# Below the kernel's ephemeral range: a port there can be taken at any time
# by an outgoing connection of any process (seen once: node 5's metrics
# port, bound by someone else between the check and the second add).
ephemeral_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
((ephemeral_low > 10000 + 1000)) || ephemeral_low=61000
base=
for _ in $(seq 1 50); do
  candidate=$((10000 + (RANDOM * 32768 + RANDOM) % (ephemeral_low - 10000 - 400)))
  ports=()
  # nodes + 2: the broker-only nodes 4 and 5 the 3-node run adds.
  for ((i = 1; i <= nodes + 2; i++)); do
    ports+=($((candidate + i)) $((candidate + 100 + i)) $((candidate + 200 + i))
            $((candidate + 300 + i)))
  done
  if ports_free "${ports[@]}"; then
    base=$candidate
    break
  fi
done
[[ -n $base ]] || fail "no free port range found"
export FERRY_CLUSTER_BASE_PORT=$base

finish() {
  local rc=$?
  set +e
  if [[ -f $FERRY_CLUSTER_DIR/cluster.conf ]]; then
    "$script" stop >/dev/null 2>&1
    # Whatever survived the stop (it SIGKILLs after its bound): by pid file.
    local pidfile pid
    for pidfile in "$FERRY_CLUSTER_DIR"/node-*/ferryd.pid; do
      [[ -f $pidfile ]] || continue
      pid=$(<"$pidfile")
      if { tr '\0' '\n' <"/proc/$pid/cmdline"; } 2>/dev/null |
        grep -xF -- "$(dirname "$pidfile")/data" >/dev/null; then
        kill -KILL "$pid" 2>/dev/null
      fi
    done
  fi
  if ((rc != 0)); then
    local log
    for log in "$FERRY_CLUSTER_DIR"/node-*/ferryd.log; do
      [[ -f $log ]] || continue
      echo "---- $log (last 40 lines)" >&2
      tail -n 40 "$log" >&2
    done
  fi
  if [[ ${FERRY_TEST_KEEP:-} == 1 ]]; then
    echo "kept $work"
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

# ferryctl as a user runs it after the start: from the folder holding
# ./ferry-cluster, no --broker, no FERRY_BROKER, no FERRY_CLUSTER_DIR.
ctl() {
  (cd "$work" && env -u FERRY_BROKER -u FERRY_CLUSTER_DIR timeout 60 "$ferryctl" "$@")
}

# curl against node 1's HTTP API ($api): https with the client certificate
# under --tls.
api=http://127.0.0.1:$((base + 101))
[[ -z $tls ]] || api=https://127.0.0.1:$((base + 101))
api_curl() {
  if [[ -n $auth ]]; then
    curl --cacert "$FERRY_CLUSTER_DIR/tls/ca.pem" -u "admin:$(<"$FERRY_CLUSTER_DIR/admin.password")" "$@"
  elif [[ -n $tls ]]; then
    local c=$FERRY_CLUSTER_DIR/tls
    curl --cacert "$c/ca.pem" --cert "$c/client.pem" --key "$c/client.key" "$@"
  else
    curl "$@"
  fi
}

step "start $nodes $tls $auth (base port $base) in $FERRY_CLUSTER_DIR"
out=$("$script" start "$nodes" $tls $auth) || fail "start failed: $out"
echo "$out"
[[ $(grep -cE '^[0-9]+ +[0-9]+ +up ' <<<"$out") == "$nodes" ]] || fail "start did not show $nodes nodes up"
[[ $(wc -l <"$FERRY_CLUSTER_DIR/brokers") == "$nodes" ]] || fail "brokers file has not $nodes lines"
[[ $(head -n 1 "$FERRY_CLUSTER_DIR/brokers") == "127.0.0.1:$((base + 1))" ]] ||
  fail "brokers file does not start with node 1"
if "$script" start "$nodes" >/dev/null 2>&1; then
  fail "a second start did not refuse"
fi

step "status"
rc=0
out=$("$script" status 2>&1) || rc=$?
echo "$out"
((rc == 0)) || fail "status exited $rc with every node up"
grep -F "$nodes of $nodes node(s) up" <<<"$out" >/dev/null || fail "status does not say all nodes are up"
grep -F "RaftTerm: " <<<"$out" >/dev/null || fail "status did not show ferryctl cluster describe"
for ((i = 1; i <= nodes; i++)); do
  grep -E "^$i +voter +127\.0\.0\.1:$((base + i)) " <<<"$out" >/dev/null ||
    fail "cluster describe does not list node $i at 127.0.0.1:$((base + i))"
done

step "ferryctl without --broker: topic create t --partitions 3 --replication-factor $rf"
ctl topic create t --partitions 3 --replication-factor "$rf" || fail "topic create failed"
# The metadata reaches node 1 (the one ferryctl asks) through the quorum,
# and the replicas elect their leaders: wait (bounded) until node 1 describes
# every partition online with a leader and a full ISR.
topic_ready() {
  local desc
  desc=$(ctl --json topic describe t 2>&1) || { echo "$desc"; return 1; }
  python3 - "$desc" "$rf" <<'EOF'
import json, sys
d = json.loads(sys.argv[1])
rf = int(sys.argv[2])
parts = d.get("partition_status", [])
ok = (d["partitions"] == 3 and d["replication_factor"] == rf and len(parts) == 3
      and all(p["online"] and p["leader"] >= 0 and len(p["replicas"]) == rf
              and len(p["isr"]) == rf for p in parts))
if not ok:
    print(json.dumps(d))
sys.exit(0 if ok else 1)
EOF
}
deadline=$((SECONDS + 30))
until last=$(topic_ready); do
  ((SECONDS < deadline)) || fail "topic t is not 3 online partitions x RF $rf with full ISRs after 30 s: $last"
  sleep 0.5
done

step "produce and consume"
sent=$(printf 'msg-%s\n' 1 2 3 4 5 6)
ctl produce t <<<"$sent" || fail "produce failed"
got=$(ctl consume t --from-beginning --max 6 --timeout 20000) || fail "consume failed"
[[ $(sort <<<"$got") == "$(sort <<<"$sent")" ]] || fail "consumed '$got', produced '$sent'"

step "Kafka clients: kcat reads what ferryctl wrote through node $nodes's Kafka port"
command -v kcat >/dev/null || fail "no kcat (deploy/install-deps.sh installs it)"
kafka_args=()
if [[ -n $auth ]]; then
  # SASL_SSL as the superuser (the port only asks for a client certificate).
  kafka_args=(-X security.protocol=SASL_SSL -X "ssl.ca.location=$FERRY_CLUSTER_DIR/tls/ca.pem"
    -X sasl.mechanisms=SCRAM-SHA-256 -X sasl.username=admin
    -X "sasl.password=$(cat "$FERRY_CLUSTER_DIR/admin.password")")
elif [[ -n $tls ]]; then
  kafka_args=(-X security.protocol=SSL -X "ssl.ca.location=$FERRY_CLUSTER_DIR/tls/ca.pem"
    -X "ssl.certificate.location=$FERRY_CLUSTER_DIR/tls/client.pem"
    -X "ssl.key.location=$FERRY_CLUSTER_DIR/tls/client.key")
fi
kgot=$(timeout 60 kcat -q -b "127.0.0.1:$((base + 300 + nodes))" "${kafka_args[@]}" -t t -C -e \
  -f '%s\n' 2>&1) || fail "kcat -C failed: $kgot"
[[ $(sort <<<"$kgot") == "$(sort <<<"$sent")" ]] || fail "kcat consumed '$kgot', produced '$sent'"

if [[ -n $tls ]]; then
  step "TLS: clients without the cluster's certificate are refused"
  certs=$FERRY_CLUSTER_DIR/tls
  for f in ca.pem client.pem client.key client.env node-1.pem node-1.key; do
    [[ -f $certs/$f ]] || fail "start --tls made no $certs/$f"
  done
  grep -F "TLS on every port" "$FERRY_CLUSTER_DIR/node-1/ferryd.log" >/dev/null ||
    fail "node 1 did not log TLS on every port"
  if ctl --broker "127.0.0.1:$((base + 1))" --connect-timeout 3000 topic list >/dev/null 2>&1; then
    fail "a plaintext ferryctl (explicit --broker, no certificate) was served"
  fi
  body=$(api_curl -sS --max-time 10 "https://127.0.0.1:$((base + 101))/v1/topics") ||
    fail "curl with the client certificate (and admin's password under --auth) failed"
  grep -F '"name":"t"' <<<"$body" >/dev/null || fail "https topic list has no topic t: $body"
  if [[ -z $auth ]]; then
    if curl -sS --max-time 10 --cacert "$certs/ca.pem" "https://127.0.0.1:$((base + 101))/v1/topics" >/dev/null 2>&1; then
      fail "curl without a client certificate was served"
    fi
  fi
  metrics=$(curl -sS --max-time 10 --cacert "$certs/ca.pem" --cert "$certs/client.pem" \
    --key "$certs/client.key" "https://127.0.0.1:$((base + 201))/metrics") ||
    fail "curl of the https metrics failed"
  grep -F "ferry_partition_high_watermark" <<<"$metrics" >/dev/null || fail "no ferry metrics over https"
fi

if [[ -n $auth ]]; then
  step "auth: admin's password file, 401 without it, a user with an ACL and a bearer token"
  pw=$FERRY_CLUSTER_DIR/admin.password
  [[ -s $pw && $(stat -c %a "$pw") == 600 ]] || fail "start --auth made no private $pw"
  grep -F "auth scram" "$FERRY_CLUSTER_DIR/node-1/ferryd.log" >/dev/null ||
    fail "node 1 did not log auth scram"
  code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 --cacert "$certs/ca.pem" \
    "https://127.0.0.1:$((base + 101))/v1/topics") || fail "curl without a password failed"
  [[ $code == 401 ]] || fail "no password: HTTP $code, not 401"
  ctl user create alice --password-stdin <<<"alice-pw-1" >/dev/null || fail "user create alice failed"
  ctl acl add --principal User:alice --operation read --topic t >/dev/null || fail "acl add failed"
  token=$(curl -sS --max-time 10 --cacert "$certs/ca.pem" -u alice:alice-pw-1 -X POST \
    "https://127.0.0.1:$((base + 101))/v1/tokens" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])') ||
    fail "alice got no token from node 1"
  last=$((nodes >= 2 ? 2 : 1))
  deadline=$((SECONDS + 20))
  until body=$(curl -sS --max-time 10 --cacert "$certs/ca.pem" -H "Authorization: Bearer $token" \
    "https://127.0.0.1:$((base + 100 + last))/v1/topics") && grep -F '"name":"t"' <<<"$body" >/dev/null; do
    ((SECONDS < deadline)) || fail "node $last did not serve alice's token: $body"
    sleep 0.5
  done
  code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 --cacert "$certs/ca.pem" \
    -H "Authorization: Bearer $token" -X DELETE "https://127.0.0.1:$((base + 101))/v1/topics/t") ||
    fail "curl DELETE as alice failed"
  [[ $code == 403 ]] || fail "alice deleted topic t: HTTP $code, not 403"
  # The CAF port: ferryctl run here acts as the operator (the state folder's
  # cluster.secret); as alice it logs in and is held to her ACLs.
  [[ $(stat -c %a "$FERRY_CLUSTER_DIR/cluster.secret") == 600 ]] ||
    fail "start --auth made no private cluster.secret"
  printf 'alice-pw-1\n' >"$work/alice.pw"
  got=$(ctl --user alice --password-file "$work/alice.pw" consume t --from-beginning --max 6 \
    --timeout 20000) || fail "alice could not consume t over the CAF port"
  [[ $(sort <<<"$got") == "$(sort <<<"$sent")" ]] || fail "alice consumed '$got'"
  if out=$(ctl --user alice --password-file "$work/alice.pw" topic delete t 2>&1); then
    fail "alice deleted topic t over the CAF port"
  fi
  grep -F "User:alice may not delete topic t" <<<"$out" >/dev/null ||
    fail "alice's delete over the CAF port: $out"
fi

step "kill $victim"
"$script" kill "$victim" || fail "kill $victim failed"
rc=0
out=$("$script" status 2>&1) || rc=$?
echo "$out"
((rc == 3)) || fail "status exited $rc with node $victim down (expected 3)"
grep -E "^$victim +- +down " <<<"$out" >/dev/null || fail "status does not show node $victim down"
if ((victim != 1)); then
  grep -E '^1 +[0-9]+ +up ' <<<"$out" >/dev/null || fail "status does not show node 1 up"
fi

step "restart $victim"
"$script" restart "$victim" || fail "restart $victim failed"
rc=0
out=$("$script" status 2>&1) || rc=$?
echo "$out"
((rc == 0)) || fail "status exited $rc after the restart"
grep -E "^$victim +[0-9]+ +up " <<<"$out" >/dev/null || fail "status does not show node $victim up again"
got=$(ctl consume t --from-beginning --max 6 --timeout 20000) || fail "consume after the restart failed"
[[ $(sort <<<"$got") == "$(sort <<<"$sent")" ]] || fail "after the restart: consumed '$got'"

if ((nodes == 3)); then
  step "partition reassign: topic m (1 partition on nodes 1,2, 300 records) moves to 2,3; 100 more after"
  ctl topic create m --partitions 1 --replication-factor 2 || fail "topic create m failed"
  deadline=$((SECONDS + 30))
  until ctl --json topic describe m 2>/dev/null |
    python3 -c 'import json,sys; p=json.load(sys.stdin)["partition_status"][0]; sys.exit(0 if p["online"] and len(p["isr"]) == 2 else 1)'; do
    ((SECONDS < deadline)) || fail "topic m has no full ISR after 30 s"
    sleep 0.5
  done
  seq 1 300 | sed 's/^/m-/' | ctl produce m || fail "produce to m failed"
  out=$(ctl --request-timeout 30000 partition reassign m 0 --replicas 2,3) || fail "reassign failed: $out"
  echo "$out"
  grep -E '^m/0: replicas 2,3, leader [23], ISR' <<<"$out" >/dev/null || fail "reassign did not end with replicas 2,3: $out"
  seq 301 400 | sed 's/^/m-/' | ctl produce m || fail "produce to m after the move failed"
  n=$(ctl consume m --from-beginning --max 400 --timeout 20000 | wc -l)
  ((n == 400)) || fail "consumed $n of 400 records of m after the move"
  deadline=$((SECONDS + 20))
  while [[ -e $FERRY_CLUSTER_DIR/node-1/data/topics/m-0 ]]; do
    ((SECONDS < deadline)) || fail "node 1 still holds m-0 after the move"
    sleep 0.5
  done
  [[ -d $FERRY_CLUSTER_DIR/node-3/data/topics/m-0 ]] || fail "node 3 has no m-0 after the move"

  step "add: broker-only node 4; m moves to 3,4; remove 4 moves it back to the voters"
  out=$("$script" add) || fail "add failed: $out"
  echo "$out"
  grep -E '^4 +[0-9]+ +up .* broker ' <<<"$out" >/dev/null || fail "add did not show node 4 up as a broker"
  [[ $(wc -l <"$FERRY_CLUSTER_DIR/brokers") == 4 ]] || fail "brokers file has not 4 lines after add"
  deadline=$((SECONDS + 30))
  until ctl cluster describe 2>/dev/null | grep -E "^4 +broker +127\.0\.0\.1:$((base + 4)) +[0-9]+ +[0-9]+ +([0-9]+|-) +yes" >/dev/null; do
    ((SECONDS < deadline)) || fail "cluster describe does not show node 4 as an alive broker after 30 s"
    sleep 0.5
  done
  out=$(ctl --request-timeout 30000 partition reassign m 0 --replicas 3,4) || fail "reassign onto 4 failed: $out"
  echo "$out"
  grep -E '^m/0: replicas 3,4, leader [34], ISR' <<<"$out" >/dev/null || fail "reassign did not end with replicas 3,4: $out"
  [[ -d $FERRY_CLUSTER_DIR/node-4/data/topics/m-0 ]] || fail "node 4 has no m-0 after the move"
  rc=0
  out=$("$script" remove 1 2>&1) || rc=$?
  ((rc == 1)) && grep -F "voter" <<<"$out" >/dev/null || fail "remove 1 (a voter) was not refused: $rc $out"
  out=$("$script" remove 4) || fail "remove 4 failed: $out"
  echo "$out"
  grep -F "left the cluster" <<<"$out" >/dev/null || fail "remove 4 did not wait for the node to leave: $out"
  ctl cluster describe | grep -E '^4 ' >/dev/null && fail "cluster describe still lists node 4"
  [[ $(ctl --json topic describe m | python3 -c 'import json,sys; print(",".join(map(str, sorted(json.load(sys.stdin)["partition_status"][0]["replicas"]))))') != *4* ]] ||
    fail "m still has a replica on node 4"
  n=$(ctl consume m --from-beginning --max 400 --timeout 20000 | wc -l)
  ((n == 400)) || fail "consumed $n of 400 records of m after removing node 4"
  rc=0
  out=$("$script" status 2>&1) || rc=$?
  ((rc == 0)) || fail "status exited $rc after remove (the removed node must not count): $out"

  step "HTTP API: DELETE /v1/cluster/nodes/5 removes broker-only node 5"
  out=$("$script" add) || fail "second add failed: $out"
  deadline=$((SECONDS + 30))
  until ctl cluster describe 2>/dev/null | grep -E "^5 +broker " >/dev/null; do
    ((SECONDS < deadline)) || fail "cluster describe does not show node 5 after 30 s"
    sleep 0.5
  done
  out=$(api_curl -sS -w ' %{http_code}' -X DELETE "$api/v1/cluster/nodes/5") ||
    fail "DELETE /v1/cluster/nodes/5 failed: $out"
  echo "$out"
  [[ $out == *' 202' && $out == *'"status":"removing"'* ]] || fail "DELETE /v1/cluster/nodes/5 did not answer 202 removing: $out"
  out=$(api_curl -sS -w ' %{http_code}' -X DELETE "$api/v1/cluster/nodes/2") || true
  [[ $out == *' 400' && $out == *invalid_request* && $out == *voter* ]] || fail "removing voter 2 over HTTP was not refused: $out"
  deadline=$((SECONDS + 30))
  while ctl cluster describe 2>/dev/null | grep -E '^5 ' >/dev/null; do
    ((SECONDS < deadline)) || fail "node 5 still listed 30 s after DELETE"
    sleep 0.5
  done
fi

step "stop"
"$script" stop || fail "stop failed"
[[ ! -e $FERRY_CLUSTER_DIR/brokers ]] || fail "stop left the brokers file"
rc=0
"$script" status >/dev/null 2>&1 || rc=$?
((rc == 3)) || fail "status after stop exited $rc (expected 3: all down)"
echo "PASS"
