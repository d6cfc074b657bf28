#!/usr/bin/env bash
# local-cluster.sh: a Ferry cluster of N ferryd nodes on 127.0.0.1, for trying
# things out and for tests. The N nodes of `start` are the voters of the
# metadata quorum (--voters lists all of them); `add` starts broker-only
# nodes (ids N+1, N+2, ...: not voters, they follow the metadata log and host
# replicas) and `remove` takes one out again. Every node runs in the
# background with its own data dir, log and pid file under one state folder.
#
#   deploy/local-cluster.sh start [N]      N voters (default 3), waits until each listens
#   deploy/local-cluster.sh start [N] --tls  the same with mutual TLS on every port:
#                                          certificates made with openssl in <state>/tls/
#   deploy/local-cluster.sh start [N] --tls --auth  and users with passwords and ACLs
#                                          (ferryd --auth scram): superuser admin, its
#                                          password in <state>/admin.password
#   deploy/local-cluster.sh status         which nodes are up (+ ferryctl cluster describe)
#   deploy/local-cluster.sh add            start one more node, broker-only, with the next id
#   deploy/local-cluster.sh remove NODE    ferryctl cluster remove-node NODE (its replicas
#                                          move to other brokers), then stop it
#   deploy/local-cluster.sh kill NODE      SIGKILL one node (a crash)
#   deploy/local-cluster.sh restart NODE   start one node again with the same flags
#   deploy/local-cluster.sh stop           SIGTERM every node, SIGKILL after a bound
#
# Environment:
#   FERRY_BUILD_DIR            folder with ferryd and ferryctl (default: build/bin
#                              of this repository, as in the README)
#   FERRY_CLUSTER_DIR          state folder (default ./ferry-cluster)
#   FERRY_CLUSTER_BASE_PORT    B (default 19090): node i listens on CAF port B+i,
#                              HTTP port B+100+i, metrics port B+200+i and
#                              Kafka port B+300+i (kcat -b 127.0.0.1:19391; with
#                              --tls, kcat -X security.protocol=SSL and the
#                              client certificate; with --auth, SASL_SSL as a user);
#                              with --auth the nodes' peer port B+400+i
#   FERRY_CLUSTER_START_TIMEOUT  seconds to wait for "listening on" (default 60)
#   FERRY_CLUSTER_STOP_TIMEOUT   seconds a node may take to stop on SIGTERM
#                                before it gets SIGKILL (default 30)
#   FERRY_CLUSTER_REMOVE_TIMEOUT seconds `remove` waits for the replicas to move
#                                (default 120)
#
# State folder:
#   cluster.conf        nodes (all ever started), voters, removed nodes, base
#                       port and ferryd path of this cluster (later commands
#                       use these, whatever the environment says)
#   brokers             "127.0.0.1:PORT" per line, node 1 first; written by start
#                       and restart, removed by stop. While it exists, ferryctl
#                       run from the folder that holds ./ferry-cluster (or with
#                       FERRY_CLUSTER_DIR) uses these nodes when --broker and
#                       FERRY_BROKER are not given.
#   node-I/data         node I's --data-dir (kept by stop: start again resumes it)
#   node-I/ferryd.log   its stdout and stderr, appended across restarts
#   node-I/ferryd.pid   its pid while it was last started
#   tls/                with --tls: ca.pem (+ ca.key), node-I.pem/.key per node,
#                       client.pem/.key (ferryctl run with the brokers file uses
#                       them), client.env (export FERRY_TLS_* for other clients);
#                       with --auth also node-ca.pem (+ .key), the CA of the
#                       nodes' peer-port certificates peer-I.pem/.key (no
#                       client certificate opens a peer port)
#   admin.password      with --auth: the password of user admin (the superuser),
#                       made at the first start (mode 0600)
#   cluster.secret      with --auth: the secret the nodes share (ferryd
#                       --cluster-secret-file; mode 0600); ferryctl run with the
#                       brokers file uses it to act as the cluster's operator
#
# Exit status: 0 on success; 1 on a failure (a node that does not come up,
# ports in use, a cluster already running); 2 on a usage error; `status` exits
# 3 when at least one node is down.

set -euo pipefail

prog=$(basename "$0")
repo_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${FERRY_BUILD_DIR:-$repo_dir/build/bin}
cluster_dir=${FERRY_CLUSTER_DIR:-./ferry-cluster}
start_timeout=${FERRY_CLUSTER_START_TIMEOUT:-60}
stop_timeout=${FERRY_CLUSTER_STOP_TIMEOUT:-30}
host=127.0.0.1

usage() {
  cat <<EOF
usage: $prog start [N] [--tls [--auth]] | status | add | remove NODE | kill NODE | restart NODE | stop

  start [N]      start N ferryd nodes (default 3, at most 99) on $host, each a
                 voter of the metadata quorum; waits until each listens
  start [N] --tls  the same with mutual TLS on the CAF, HTTP and metrics ports
                 of every node (a new cluster only: a CA and certificates are
                 made with openssl in the state folder's tls/)
  start [N] --tls --auth  and users (ferryd --auth scram --superusers admin):
                 the HTTP API wants a password or bearer token and checks ACLs;
                 user admin is made with a random password, kept in the state
                 folder's admin.password (ferryctl user/acl manage the rest);
                 the nodes talk to each other on peer ports (ferryd
                 --peer-port, base port + 400 + I) with certificates of a CA
                 of their own
  status         which nodes are up, then 'ferryctl cluster describe' (exit 3 if
                 any node is down)
  add            start one more node with the next id, a broker-only node (not
                 a voter: it follows the metadata log, registers and hosts
                 replicas; new topics place replicas on it)
  remove NODE    remove broker-only node NODE: 'ferryctl cluster remove-node'
                 moves its replicas to the other brokers while they serve
                 traffic and unregisters it, then the node is stopped (voters
                 cannot be removed)
  kill NODE      SIGKILL node NODE (1..N)
  restart NODE   start node NODE again with the same flags (SIGTERM first if it
                 is up)
  stop           SIGTERM every node, SIGKILL after \$FERRY_CLUSTER_STOP_TIMEOUT s;
                 data and logs stay

environment: FERRY_BUILD_DIR (programs; now $build_dir)
             FERRY_CLUSTER_DIR (state; now $cluster_dir)
             FERRY_CLUSTER_BASE_PORT B (default 19090): node i uses CAF port
               B+i, HTTP B+100+i, metrics B+200+i, Kafka B+300+i,
               with --auth peers B+400+i
             FERRY_CLUSTER_START_TIMEOUT, FERRY_CLUSTER_STOP_TIMEOUT (seconds)
EOF
}

die() {
  echo "$prog: $*" >&2
  exit 1
}

usage_error() {
  echo "$prog: $*" >&2
  echo "run '$prog --help' for usage" >&2
  exit 2
}

is_uint() {
  [[ $1 =~ ^[0-9]+$ ]]
}

is_uint "$start_timeout" || usage_error "FERRY_CLUSTER_START_TIMEOUT '$start_timeout' is not a number of seconds"
is_uint "$stop_timeout" || usage_error "FERRY_CLUSTER_STOP_TIMEOUT '$stop_timeout' is not a number of seconds"

# -- the cluster's configuration --------------------------------------------------

nodes=
voter_count=
removed=
base_port=
ferryd=
tls=0
auth=0

# Loads cluster.conf (nodes, voters, removed, base_port, ferryd) or fails: no
# cluster here. (voters= and removed= are absent in clusters started before
# broker-only nodes existed: all nodes are voters then.)
load_conf() {
  local conf=$cluster_dir/cluster.conf
  [[ -f $conf ]] || die "no local cluster in $cluster_dir (start one with: $prog start)"
  nodes='' voter_count='' removed='' base_port='' ferryd='' tls=0 auth=0
  local key value
  while IFS='=' read -r key value; do
    case $key in
      nodes) nodes=$value ;;
      voters) voter_count=$value ;;
      removed) removed=$value ;;
      base_port) base_port=$value ;;
      ferryd) ferryd=$value ;;
      tls) tls=$value ;;
      auth) auth=$value ;;
    esac
  done <"$conf"
  voter_count=${voter_count:-$nodes}
  if ! is_uint "$nodes" || ! is_uint "$voter_count" || ! is_uint "$base_port" || [[ -z $ferryd ]]; then
    die "$conf is damaged (expected nodes=, voters=, base_port=, ferryd= lines)"
  fi
  set_ids
  # An absolute path from now on: the nodes' --data-dir must not depend on
  # where later commands run.
  cluster_dir=$(cd "$cluster_dir" && pwd)
}

save_conf() {
  printf 'nodes=%s\nvoters=%s\nremoved=%s\nbase_port=%s\nferryd=%s\ntls=%s\nauth=%s\n' "$nodes" \
    "$voter_count" "$removed" "$base_port" "$ferryd" "$tls" "$auth" >"$cluster_dir/cluster.conf.tmp"
  mv "$cluster_dir/cluster.conf.tmp" "$cluster_dir/cluster.conf"
}

is_removed() { [[ ,$removed, == *,$1,* ]]; }

caf_port() { echo $((base_port + $1)); }
http_port() { echo $((base_port + 100 + $1)); }
metrics_port() { echo $((base_port + 200 + $1)); }
# The Kafka listener, on every node: TLS with --tls, SASL logins with --auth.
kafka_on() { true; }
kafka_port() { echo $((base_port + 300 + $1)); }
# With --auth the nodes talk on peer ports (ferryd --peer-port): their
# actors never share an actor system with clients.
peer_ports_on() { ((auth == 1)); }
peer_port() { echo $((base_port + 400 + $1)); }
node_peer_args() {
  peer_ports_on || return 0
  local d
  d=$(tls_dir)
  echo --peer-port "$(peer_port "$1")" --peer-tls-ca "$d/node-ca.pem" \
    --peer-tls-cert "$d/peer-$1.pem" --peer-tls-key "$d/peer-$1.key"
}
node_kafka_args() {
  kafka_on || return 0
  echo --kafka-port "$(kafka_port "$1")"
}
node_dir() { echo "$cluster_dir/node-$1"; }
tls_dir() { echo "$cluster_dir/tls"; }

# -- TLS (start --tls) -------------------------------------------------------------

# One openssl call, quiet unless it fails.
ossl() {
  local out
  out=$(openssl "$@" 2>&1) || die "openssl $1 failed: $out"
}

# A certificate NAME (CN=NAME, valid for 127.0.0.1 and localhost) signed by
# CA $2 (default: ca, the cluster CA), made unless it exists.
make_cert() {
  local d name=$1 ca=${2:-ca}
  d=$(tls_dir)
  [[ -f $d/$name.pem && -f $d/$name.key ]] && return 0
  ossl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$d/$name.key" -out "$d/$name.csr" -subj "/CN=$name"
  ossl x509 -req -in "$d/$name.csr" -CA "$d/$ca.pem" -CAkey "$d/$ca.key" -CAcreateserial \
    -out "$d/$name.pem" -days 365 -extfile "$d/san.ext"
  rm -f "$d/$name.csr"
  chmod 600 "$d/$name.key"
}

# A self-signed CA NAME (NAME.pem, NAME.key) with common name $2, made unless
# it exists.
make_ca() {
  local d name=$1
  d=$(tls_dir)
  [[ -f $d/$name.pem ]] && return 0
  ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$d/$name.key" -out "$d/$name.pem" -days 365 -subj "/CN=$2"
  chmod 600 "$d/$name.key"
}

# The CA (once), a certificate per node in "$@", the client certificate.
make_certs() {
  command -v openssl >/dev/null || die "--tls needs the openssl program (Debian package openssl)"
  local d i
  d=$(tls_dir)
  mkdir -p "$d"
  chmod 700 "$d"
  make_ca ca "ferry local cluster CA"
  peer_ports_on && make_ca node-ca "ferry local cluster node CA"
  echo "subjectAltName=IP:127.0.0.1,DNS:localhost" >"$d/san.ext"
  for i in "$@"; do
    make_cert "node-$i"
    peer_ports_on && make_cert "peer-$i" node-ca
  done
  make_cert client
  printf 'export FERRY_TLS_CERT=%q FERRY_TLS_KEY=%q FERRY_TLS_CA=%q\n' \
    "$d/client.pem" "$d/client.key" "$d/ca.pem" >"$d/client.env"
}

# ferryd's TLS flags of node I (none without TLS).
node_tls_args() {
  ((tls == 1)) || return 0
  local d
  d=$(tls_dir)
  echo --tls-cert "$d/node-$1.pem" --tls-key "$d/node-$1.key" --tls-ca "$d/ca.pem"
}

# ferryd's user flags (none without --auth). Scripts and browsers log in to
# the HTTP API with a password, so it only asks for a client certificate.
node_auth_args() {
  ((auth == 1)) || return 0
  echo --auth scram --superusers admin --tls-client-auth requested \
    --cluster-secret-file "$(cluster_secret_file)"
}

cluster_secret_file() { echo "$cluster_dir/cluster.secret"; }

# With --auth, once: the secret the nodes share (they log in to each other
# with it; ferryctl run with the brokers file acts as the operator with it).
make_cluster_secret() {
  ((auth == 1)) || return 0
  local file
  file=$(cluster_secret_file)
  [[ -s $file ]] && return 0
  (umask 077 && openssl rand -hex 32 >"$file.tmp") && mv "$file.tmp" "$file"
}

admin_password_file() { echo "$cluster_dir/admin.password"; }

# With --auth, once: user admin with a random password (over the CAF port,
# as the cluster's operator: the cluster secret is the credential).
make_admin() {
  ((auth == 1)) || return 0
  local file ferryctl
  file=$(admin_password_file)
  [[ -s $file ]] && return 0
  ferryctl=$(ferryctl_path)
  (umask 077 && openssl rand -hex 16 >"$file.tmp")
  timeout 60 "$ferryctl" --broker "$(paste -sd, "$cluster_dir/brokers")" --connect-timeout 3000 \
    $(client_tls_args) --request-timeout 30000 \
    user create admin --password-stdin <"$file.tmp" \
    >/dev/null || { rm -f "$file.tmp"; die "ferryctl user create admin failed"; }
  mv "$file.tmp" "$file"
}

# ferryctl's TLS flags (none without TLS), and with --auth the operator's
# login (the cluster secret).
client_tls_args() {
  ((tls == 1)) || return 0
  local d
  d=$(tls_dir)
  echo --tls-cert "$d/client.pem" --tls-key "$d/client.key" --tls-ca "$d/ca.pem"
  ((auth == 1)) || return 0
  echo --cluster-secret-file "$(cluster_secret_file)"
}

voters() {
  local i out=
  for ((i = 1; i <= voter_count; i++)); do
    if peer_ports_on; then
      out+=${out:+,}$i@$host:$(peer_port "$i")
    else
      out+=${out:+,}$i@$host:$(caf_port "$i")
    fi
  done
  echo "$out"
}

write_brokers() {
  local i tmp=$cluster_dir/brokers.tmp
  : >"$tmp"
  for i in "${ids[@]}"; do
    echo "$host:$(caf_port "$i")" >>"$tmp"
  done
  mv "$tmp" "$cluster_dir/brokers"
}

# Node NODE given on the command line: a number in 1..nodes.
check_node() {
  if ! is_uint "$1" || ((10#$1 < 1 || 10#$1 > nodes)); then
    usage_error "no node '$1': this cluster has nodes 1..$nodes"
  fi
  if is_removed "$((10#$1))"; then
    die "node $((10#$1)) was removed from this cluster"
  fi
}

# -- processes ------------------------------------------------------------------------

# Prints node I's pid when it runs: the pid file names a live process whose
# command line has this node's data dir (not a recycled pid, not a zombie).
node_pid() {
  local pidfile pid
  pidfile=$(node_dir "$1")/ferryd.pid
  [[ -f $pidfile ]] || return 0
  pid=$(<"$pidfile")
  is_uint "$pid" || return 0
  kill -0 "$pid" 2>/dev/null || return 0
  if [[ -r /proc/$pid/cmdline ]]; then
    # (grep without -q: it reads all input, so no SIGPIPE fails the pipe.)
    { tr '\0' '\n' <"/proc/$pid/cmdline"; } 2>/dev/null |
      grep -xF -- "$(node_dir "$1")/data" >/dev/null || return 0
  fi
  echo "$pid"
}

# True when something accepts connections on 127.0.0.1:PORT.
port_in_use() {
  (exec 3<>"/dev/tcp/$host/$1") 2>/dev/null
}

# Starts node I in the background (its own session, so it outlives the
# terminal and this script); records its pid and where its log continues.
launch() {
  local i=$1 dir
  dir=$(node_dir "$i")
  mkdir -p "$dir/data"
  local log=$dir/ferryd.log
  touch "$log"
  log_offset[i]=$(stat -c %s "$log")
  echo "--- $(date '+%F %T') $prog: starting node $i" >>"$log"
  log_offset[i]=$(stat -c %s "$log")
  local args=(--node-id "$i" --voters "$(voters)" --host "$host"
              --port "$(caf_port "$i")" --data-dir "$dir/data"
              --http-port "$(http_port "$i")" --metrics-port "$(metrics_port "$i")"
              $(node_tls_args "$i") $(node_auth_args) $(node_peer_args "$i")
              $(node_kafka_args "$i"))
  if command -v setsid >/dev/null; then
    setsid "$ferryd" "${args[@]}" >>"$log" 2>&1 </dev/null &
  else
    nohup "$ferryd" "${args[@]}" >>"$log" 2>&1 </dev/null &
  fi
  local pid=$!
  echo "$pid" >"$dir/ferryd.pid"
  # Until the forked shell has exec'd ferryd its command line is this
  # script's, and node_pid would call the node down: wait for the exec
  # (bounded; a ferryd that exits at once is caught by wait_listening).
  local tries
  for ((tries = 0; tries < 50; tries++)); do
    [[ -z $(node_pid "$i") ]] || break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
}

# Waits until every node in "$@" printed "listening on" since its launch.
# Fails naming the first node that exited or did not make it in time.
wait_listening() {
  local deadline=$((SECONDS + start_timeout)) pending=("$@") i still
  while ((${#pending[@]} > 0)); do
    still=()
    for i in "${pending[@]}"; do
      local log
      log=$(node_dir "$i")/ferryd.log
      if tail -c +"$((log_offset[i] + 1))" "$log" | grep '^listening on ' >/dev/null; then
        continue
      fi
      if [[ -z $(node_pid "$i") ]]; then
        echo "$prog: node $i exited before it listened; the end of $log:" >&2
        tail -n 20 "$log" | sed 's/^/  /' >&2
        return 1
      fi
      still+=("$i")
    done
    pending=(${still[@]+"${still[@]}"})
    ((${#pending[@]} == 0)) && break
    if ((SECONDS >= deadline)); then
      echo "$prog: node(s) ${pending[*]} did not print 'listening on' within ${start_timeout} s (logs: $cluster_dir/node-*/ferryd.log)" >&2
      return 1
    fi
    sleep 0.2
  done
}

# With peer ports the voters' entries name peer ports, so cluster describe
# shows a node's client endpoint once its registration is applied (about a
# second after it listens): waits for that, at most the start timeout.
wait_registered() {
  peer_ports_on || return 0
  local ferryctl deadline=$((SECONDS + start_timeout)) out
  ferryctl=$(ferryctl_path)
  while :; do
    out=$(timeout 30 "$ferryctl" --broker "$(paste -sd, "$cluster_dir/brokers")" \
      --connect-timeout 3000 $(client_tls_args) --request-timeout 10000 cluster describe \
      2>/dev/null) || out=
    if [[ -n $out ]] && ! grep -qE '^[0-9]+ +(voter|broker) +- ' <<<"$out"; then
      return 0
    fi
    if ((SECONDS >= deadline)); then
      echo "$prog: not every node registered its client port within ${start_timeout} s" >&2
      return 1
    fi
    sleep 0.3
  done
}

# Sends SIGNAL (TERM or KILL; "signaled": TERM was sent already) to node I
# if it runs and waits up to TIMEOUT s for it to go; after SIGTERM it gets
# SIGKILL then. Quiet when it was not running.
stop_node() {
  local i=$1 signal=$2 timeout=$3 pid
  pid=$(node_pid "$i")
  [[ -n $pid ]] || return 0
  if [[ $signal == signaled ]]; then
    signal=TERM
  else
    kill -s "$signal" "$pid" 2>/dev/null || true
  fi
  local deadline=$((SECONDS + timeout))
  while [[ -n $(node_pid "$i") ]]; do
    if ((SECONDS >= deadline)); then
      if [[ $signal == KILL ]]; then
        echo "$prog: node $i (pid $pid) survived SIGKILL for ${timeout} s" >&2
        return 1
      fi
      echo "$prog: node $i (pid $pid) still up ${timeout} s after SIG$signal: SIGKILL" >&2
      kill -s KILL "$pid" 2>/dev/null || true
      signal=KILL
      deadline=$((SECONDS + 10))
    fi
    sleep 0.1
  done
}

print_table() {
  local i pid state role
  printf '%-5s %-8s %-6s %-16s %-6s %-8s %-6s %-7s %s\n' NODE PID STATE CAF HTTP METRICS KAFKA \
    ROLE DATA_DIR
  for i in "$@"; do
    pid=$(node_pid "$i")
    state=up
    [[ -n $pid ]] || { pid=- state=down; }
    role=voter
    ((i <= voter_count)) || role=broker
    printf '%-5s %-8s %-6s %-16s %-6s %-8s %-6s %-7s %s\n' "$i" "$pid" "$state" \
      "$host:$(caf_port "$i")" "$(http_port "$i")" "$(metrics_port "$i")" \
      "$(if kafka_on; then kafka_port "$i"; else echo -; fi)" "$role" \
      "$(node_dir "$i")/data"
  done
}

# ids: the node numbers 1..nodes without the removed ones.
ids=()
set_ids() {
  local i
  ids=()
  for ((i = 1; i <= nodes; i++)); do
    is_removed "$i" || ids+=("$i")
  done
}

# -- commands -------------------------------------------------------------------------

cmd_start() {
  local want= want_tls=0 want_auth=0 arg
  for arg in "$@"; do
    case $arg in
      --tls) want_tls=1 ;;
      --auth) want_auth=1 ;;
      *)
        [[ -z $want ]] || usage_error "start takes at most one number (N), got: $*"
        want=$arg
        ;;
    esac
  done
  ((want_auth == 0 || want_tls == 1)) ||
    usage_error "start --auth needs --tls (passwords never cross the network in the clear)"
  if [[ -n $want ]]; then
    if ! is_uint "$want" || ((10#$want < 1 || 10#$want > 99)); then
      usage_error "start: N must be a number of nodes from 1 to 99, not '$want'"
    fi
    want=$((10#$want))
  fi
  local env_base=${FERRY_CLUSTER_BASE_PORT:-}
  if [[ -n $env_base ]]; then
    is_uint "$env_base" || usage_error "FERRY_CLUSTER_BASE_PORT '$env_base' is not a port number"
    env_base=$((10#$env_base))
  fi
  if [[ -f $cluster_dir/cluster.conf ]]; then
    # A cluster lived here: resume it with the same nodes and ports.
    load_conf
    local i
    for i in "${ids[@]}"; do
      local pid
      pid=$(node_pid "$i")
      [[ -z $pid ]] || die "a cluster is already running in $cluster_dir (node $i, pid $pid); '$prog stop' first"
    done
    [[ -z $want || $want == "$voter_count" ]] ||
      die "$cluster_dir holds a cluster of $voter_count voters: start it with '$prog start $voter_count', or remove $cluster_dir for a new one"
    [[ -z $env_base || $env_base == "$base_port" ]] ||
      die "$cluster_dir holds a cluster on base port $base_port (FERRY_CLUSTER_BASE_PORT=$env_base): unset it, or remove $cluster_dir for a new one"
    ((want_tls == 0 || tls == 1)) ||
      die "$cluster_dir holds a cluster without TLS: start it without --tls, or remove $cluster_dir for a new one"
    ((want_auth == 0 || auth == 1)) ||
      die "$cluster_dir holds a cluster without users: start it without --auth, or remove $cluster_dir for a new one"
  else
    nodes=${want:-3}
    voter_count=$nodes
    removed=
    base_port=${env_base:-19090}
    ferryd=$build_dir/ferryd
    tls=$want_tls
    auth=$want_auth
    set_ids
  fi
  ((base_port >= 1 && base_port + 400 + nodes <= 65535)) ||
    usage_error "base port $base_port: ports $((base_port + 1))..$((base_port + 400 + nodes)) must be within 1..65535"
  [[ -x $ferryd ]] || die "no ferryd program at $ferryd (build first, or set FERRY_BUILD_DIR to the folder with ferryd)"
  local i p busy=()
  for i in "${ids[@]}"; do
    for p in $(caf_port "$i") $(http_port "$i") $(metrics_port "$i") \
      $(kafka_on && kafka_port "$i") $(peer_ports_on && peer_port "$i"); do
      port_in_use "$p" && busy+=("$p")
    done
  done
  ((${#busy[@]} == 0)) ||
    die "port(s) ${busy[*]} on $host are in use: stop what listens there, or pick other ports with FERRY_CLUSTER_BASE_PORT"
  mkdir -p "$cluster_dir"
  cluster_dir=$(cd "$cluster_dir" && pwd)
  ((tls == 0)) || make_certs "${ids[@]}"
  make_cluster_secret
  save_conf
  for i in "${ids[@]}"; do
    launch "$i"
  done
  if ! wait_listening "${ids[@]}"; then
    echo "$prog: stopping the nodes that did start" >&2
    for i in "${ids[@]}"; do
      stop_node "$i" TERM 10 || true
    done
    rm -f "$cluster_dir/brokers"
    exit 1
  fi
  write_brokers
  make_admin
  wait_registered || exit 1
  echo "started a cluster of ${#ids[@]} node(s) ($voter_count voters) in $cluster_dir"
  print_table "${ids[@]}"
  local how="with FERRY_CLUSTER_DIR=$cluster_dir"
  [[ $(basename "$cluster_dir") != ferry-cluster ]] || how+=" or run from $(dirname "$cluster_dir")"
  echo "brokers: $(paste -sd, "$cluster_dir/brokers") (ferryctl's default $how)"
  if ((tls == 1)); then
    local d
    d=$(tls_dir)
    echo "TLS: mutual TLS on every port; certificates in $d (ferryctl's default above uses client.pem;"
    echo "  other clients: source $d/client.env, or"
    if ((auth == 1)); then
      echo "  curl --cacert $d/ca.pem -u admin:\$(cat $(admin_password_file)) https://$host:$(http_port "${ids[0]}")/v1/topics)"
      echo "users: superuser admin (password in $(admin_password_file)); add others with"
      echo "  ferryctl user create NAME --password-stdin, and allow them with ferryctl acl add"
    else
      echo "  curl --cacert $d/ca.pem --cert $d/client.pem --key $d/client.key https://$host:$(http_port "${ids[0]}")/v1/topics)"
    fi
  fi
}

cmd_status() {
  load_conf
  local i up=() down=()
  for i in "${ids[@]}"; do
    if [[ -n $(node_pid "$i") ]]; then up+=("$i"); else down+=("$i"); fi
  done
  print_table "${ids[@]}"
  echo "${#up[@]} of ${#ids[@]} node(s) up${down[*]:+; down: ${down[*]}}"
  local ferryctl=$build_dir/ferryctl
  [[ -x $ferryctl ]] || ferryctl=$(dirname "$ferryd")/ferryctl
  if ((${#up[@]} > 0)) && [[ -x $ferryctl ]]; then
    local broker rc=0
    broker=$host:$(caf_port "${up[0]}")
    echo
    echo "\$ ferryctl --broker $broker cluster describe"
    timeout 30 "$ferryctl" --broker "$broker" --connect-timeout 3000 $(client_tls_args) \
      --request-timeout 10000 cluster describe || rc=$?
    ((rc == 0)) || echo "$prog: ferryctl cluster describe failed (exit $rc)" >&2
  fi
  ((${#down[@]} == 0)) || return 3
}

cmd_kill() {
  load_conf
  check_node "$1"
  local i=$((10#$1)) pid
  pid=$(node_pid "$i")
  if [[ -z $pid ]]; then
    echo "node $i is not running"
    return 0
  fi
  stop_node "$i" KILL 10
  echo "killed node $i (pid $pid, SIGKILL)"
}

# Starts node $1 once its ports are free and waits until it listens (or
# stops it and exits).
launch_listening() {
  local i=$1 p busy=()
  for p in $(caf_port "$i") $(http_port "$i") $(metrics_port "$i") \
    $(kafka_on && kafka_port "$i") $(peer_ports_on && peer_port "$i"); do
    port_in_use "$p" && busy+=("$p")
  done
  ((${#busy[@]} == 0)) || die "node $i's port(s) ${busy[*]} are in use by something else"
  [[ -x $ferryd ]] || die "no ferryd program at $ferryd"
  launch "$i"
  if ! wait_listening "$i"; then
    stop_node "$i" TERM 10 || true
    exit 1
  fi
}

cmd_restart() {
  load_conf
  check_node "$1"
  local i=$((10#$1)) pid
  pid=$(node_pid "$i")
  if [[ -n $pid ]]; then
    echo "stopping node $i (pid $pid)"
    stop_node "$i" TERM "$stop_timeout"
  fi
  launch_listening "$i"
  write_brokers
  echo "restarted node $i"
  print_table "$i"
}

# The ferryctl next to ferryd (or in FERRY_BUILD_DIR).
ferryctl_path() {
  local ferryctl=$build_dir/ferryctl
  [[ -x $ferryctl ]] || ferryctl=$(dirname "$ferryd")/ferryctl
  [[ -x $ferryctl ]] || die "no ferryctl program next to $ferryd or in $build_dir"
  echo "$ferryctl"
}

cmd_add() {
  load_conf
  local i=$((nodes + 1))
  ((i <= 99)) || die "a local cluster has at most 99 node ids"
  ((base_port + 200 + i <= 65535)) || die "node $i's ports would exceed 65535"
  ((tls == 0)) || make_certs "$i"
  launch_listening "$i"
  nodes=$i
  save_conf
  set_ids
  write_brokers
  echo "added broker-only node $i (it registers with the controller; new topics place replicas on it)"
  print_table "$i"
}

cmd_remove() {
  load_conf
  check_node "$1"
  local i=$((10#$1))
  ((i > voter_count)) ||
    die "node $i is a voter of the metadata quorum; voters are fixed and cannot be removed (only nodes started with '$prog add')"
  local ferryctl j up=
  ferryctl=$(ferryctl_path)
  for j in "${ids[@]}"; do
    if ((j != i)) && [[ -n $(node_pid "$j") ]]; then
      up+=${up:+,}$host:$(caf_port "$j")
    fi
  done
  [[ -n $up ]] || die "no other node is up to ask"
  echo "\$ ferryctl cluster remove-node $i"
  timeout 300 "$ferryctl" --broker "$up" --connect-timeout 3000 $(client_tls_args) \
    --request-timeout "${FERRY_CLUSTER_REMOVE_TIMEOUT:-120}000" cluster remove-node "$i" ||
    die "ferryctl cluster remove-node $i failed; node $i keeps running"
  stop_node "$i" TERM "$stop_timeout" || true
  rm -f "$(node_dir "$i")/ferryd.pid"
  removed=${removed:+$removed,}$i
  save_conf
  set_ids
  write_brokers
  echo "removed node $i (stopped; its data dir $(node_dir "$i") is no longer used)"
}

cmd_stop() {
  load_conf
  local i pid running=()
  for i in "${ids[@]}"; do
    pid=$(node_pid "$i")
    if [[ -n $pid ]]; then
      kill -s TERM "$pid" 2>/dev/null || true
      running+=("$i")
    fi
  done
  local failed=0
  # All got SIGTERM at once above; now wait for each (SIGKILL after the bound).
  for i in ${running[@]+"${running[@]}"}; do
    stop_node "$i" signaled "$stop_timeout" || failed=1
  done
  rm -f "$cluster_dir/brokers"
  for i in "${ids[@]}"; do
    [[ -n $(node_pid "$i") ]] || rm -f "$(node_dir "$i")/ferryd.pid"
  done
  echo "stopped ${#running[@]} node(s) in $cluster_dir (data and logs kept)"
  return "$failed"
}

# -- main -----------------------------------------------------------------------------

declare -a log_offset=()
(($# >= 1)) || { usage >&2; exit 2; }
command=$1
shift
case $command in
  -h | --help | help)
    usage
    ;;
  start)
    (($# <= 3)) || usage_error "start takes at most three arguments (N, --tls, --auth), got: $*"
    cmd_start "$@"
    ;;
  status)
    (($# == 0)) || usage_error "status takes no arguments"
    cmd_status
    ;;
  add)
    (($# == 0)) || usage_error "add takes no arguments"
    cmd_add
    ;;
  kill | restart | remove)
    (($# == 1)) || usage_error "$command takes one argument: the node number"
    "cmd_$command" "$1"
    ;;
  stop)
    (($# == 0)) || usage_error "stop takes no arguments"
    cmd_stop
    ;;
  *)
    usage_error "unknown command '$command'"
    ;;
esac
