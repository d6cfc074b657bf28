#!/usr/bin/env bash
# Ferry next to Redis streams on this machine, same durability (fsync before
# the ack), 1 KB messages. Starts its own ferryd and redis-server on
# 127.0.0.1 (free ports, a temp dir each) and always stops them (trap), then
# runs, one after the other:
#
#   ferry-bench produce                 1 KB, acks=all, durable group commit
#                                       (ferryd's default), default settings
#   ferry-bench consume                 reads those messages back
#   ferry-bench produce --rate 50000    open-loop, latency from the intended
#                                       send time
#   redis-benchmark -P 16 XADD          redis-server --appendonly yes
#                                       --appendfsync always --save ""
#
# and prints a table with the rates and the ratio Ferry produce / Redis XADD.
#
# Environment:
#   FERRY_BUILD_DIR  where ferryd and ferry-bench are   (./build/bin)
#   MESSAGES         ferry produce/consume and XADD count   (200000)
#   RATE             open-loop produce rate, msgs/s         (50000)
#   RATE_SECONDS     how long the open-loop run lasts       (10)
#   REDIS_CLIENTS    redis-benchmark -c                     (50, its default)
#   BENCH_TMP        parent of the temp dirs: put it on the disk to measure
#                    ($TMPDIR or /tmp)
#   KEEP_TMP=1       keep the temp dirs (logs, data) for a look afterwards
#
# redis-server and redis-benchmark come from Debian's redis-server and
# redis-tools packages; they are installed with apt-get when missing (this is
# a benchmark-only tool, so deploy/install-deps.sh does not list them).
set -euo pipefail

BUILD_DIR=${FERRY_BUILD_DIR:-./build/bin}
MESSAGES=${MESSAGES:-200000}
RATE=${RATE:-50000}
RATE_SECONDS=${RATE_SECONDS:-10}
REDIS_CLIENTS=${REDIS_CLIENTS:-50}
SIZE=1024

die() { echo "compare-redis: $*" >&2; exit 1; }

FERRYD=$BUILD_DIR/ferryd
BENCH=$BUILD_DIR/ferry-bench
[ -x "$FERRYD" ] || die "no ferryd in $BUILD_DIR (set FERRY_BUILD_DIR)"
[ -x "$BENCH" ] || die "no ferry-bench in $BUILD_DIR (set FERRY_BUILD_DIR)"

if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null \
   || ! command -v redis-cli >/dev/null; then
  echo "compare-redis: installing redis-server and redis-tools" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  # The package must not start a system-wide redis of its own.
  made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    made_policy=1
  fi
  if ! $SUDO apt-get install -y -q redis-server redis-tools >/dev/null; then
    $SUDO apt-get update -q >/dev/null
    $SUDO apt-get install -y -q redis-server redis-tools >/dev/null
  fi
  if [ "$made_policy" = 1 ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi
fi

WORK=$(mktemp -d "${BENCH_TMP:-${TMPDIR:-/tmp}}/ferry-vs-redis.XXXXXX")
FERRYD_PID=""
REDIS_PID=""
CHILD_PID="" # the benchmark client running now

# Stops what this script started (by PID), on every exit path.
stop_pid() { # pid name
  local pid=$1
  [ -n "$pid" ] || return 0
  kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "compare-redis: $2 did not stop within 10 s, killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  local rc=0
  wait "$pid" 2>/dev/null || rc=$?
  if [ "$rc" != 0 ]; then echo "compare-redis: $2 exited with status $rc" >&2; fi
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_pid "$CHILD_PID" "the benchmark client"
  stop_pid "$FERRYD_PID" ferryd
  stop_pid "$REDIS_PID" redis-server
  if [ "${KEEP_TMP:-0}" = 1 ]; then
    echo "compare-redis: kept $WORK" >&2
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# -- ferryd: port 0 picks a free port; it prints "listening on HOST:PORT" ----
mkdir -p "$WORK/ferry"
# Metrics and the HTTP API stay on (as deployed), on free ports too.
"$FERRYD" --data-dir "$WORK/ferry/data" --host 127.0.0.1 --port 0 \
  --metrics-port 0 --http-port 0 >"$WORK/ferry/ferryd.log" 2>&1 &
FERRYD_PID=$!
FERRY_ADDR=""
for _ in $(seq 1 300); do
  FERRY_ADDR=$(sed -n 's/^listening on \([0-9.]*:[0-9]*\)\r\{0,1\}$/\1/p' "$WORK/ferry/ferryd.log" | head -n1)
  [ -n "$FERRY_ADDR" ] && break
  kill -0 "$FERRYD_PID" 2>/dev/null || break
  sleep 0.1
done
[ -n "$FERRY_ADDR" ] || { cat "$WORK/ferry/ferryd.log" >&2; die "ferryd did not start"; }
METRICS_ADDR=$(sed -n 's/^metrics on \([0-9.]*:[0-9]*\)\r\{0,1\}$/\1/p' "$WORK/ferry/ferryd.log" | head -n1)

# -- redis-server on a free port ------------------------------------------------
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 40000))
    # Nothing answers there (bash's /dev/tcp): free, as far as we can tell.
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  return 1
}
mkdir -p "$WORK/redis"
REDIS_PORT=""
for _ in 1 2 3 4 5; do
  port=$(free_port) || die "no free port for redis-server"
  redis-server --bind 127.0.0.1 --port "$port" --dir "$WORK/redis" --daemonize no \
    --appendonly yes --appendfsync always --save "" --protected-mode yes \
    --logfile "$WORK/redis/redis.log" &
  REDIS_PID=$!
  for _ in $(seq 1 100); do
    if [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ]; then
      REDIS_PORT=$port
      break
    fi
    kill -0 "$REDIS_PID" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$REDIS_PORT" ] && break
  stop_pid "$REDIS_PID" redis-server # port taken meanwhile: try another
  REDIS_PID=""
done
[ -n "$REDIS_PORT" ] || { cat "$WORK/redis/redis.log" >&2; die "redis-server did not start"; }
[ "$(redis-cli -p "$REDIS_PORT" config get appendfsync | tail -n1)" = always ] \
  || die "redis-server is not on appendfsync always"

echo "# $(nproc) CPUs; data on $(df -P "$WORK" | awk 'NR==2 {print $1}') ($WORK)"
echo "# ferryd $FERRY_ADDR ($("$FERRYD" --version 2>/dev/null | head -n1)), redis-server 127.0.0.1:$REDIS_PORT ($(redis-server --version | awk '{print $3}'))"

# -- runs -------------------------------------------------------------------------
VALUE=$(head -c "$SIZE" /dev/zero | tr '\0' 'v') # the XADD payload
# One ferry-bench line looks like
#   produce: 200000 msgs in 1.1 s, 180000 msgs/s, 184.3 MB/s; latency ms p50 .. p99 .. p99.9 .. max ..
field() { # line word-before-value
  echo "$1" | grep -o "$2 [0-9.]*" | head -n1 | awk '{print $NF}'
}
# Runs a client in the background and waits for it, so that a signal to
# this script is handled at once (and stops the client too). Its output goes
# to stderr and to $WORK/last.out.
run_client() { # label command args...
  local label=$1 rc=0
  shift
  "$@" >"$WORK/last.out" 2>&1 &
  CHILD_PID=$!
  wait "$CHILD_PID" || rc=$?
  CHILD_PID=""
  local text
  text=$(cat "$WORK/last.out")
  echo "${text//$VALUE/<1 KB value>}" >&2
  [ "$rc" = 0 ] || die "$label failed (exit status $rc)"
}
run_bench() { # variable label args...
  local var=$1 label=$2
  shift 2
  echo "\$ ferry-bench $*" >&2
  run_client "$label" "$BENCH" --broker "$FERRY_ADDR" "$@"
  printf -v "$var" '%s' "$(grep -E '^(produce|consume):' "$WORK/last.out" | head -n1)"
}

run_bench P_LINE "produce" produce --topic bench-1k --messages "$MESSAGES" --size "$SIZE" --acks all
run_bench C_LINE "consume" consume --topic bench-1k --messages "$MESSAGES" --size "$SIZE"
run_bench R_LINE "paced produce" produce --topic bench-1k-rate \
  --messages $((RATE * RATE_SECONDS)) --size "$SIZE" --acks all --rate "$RATE"

# The paced run's log flushes (ferry_log_flush_seconds): a stalling disk
# shows here, and explains a p99 far above the p50.
scrape() { # host:port -> the text of /metrics (bash's /dev/tcp: no curl needed)
  local host=${1%:*} port=${1##*:}
  exec 3<>"/dev/tcp/$host/$port" || return 1
  printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n' "$host" >&3
  cat <&3
  exec 3<&-
}
FLUSH_LINE="ferryd log flushes in the paced run: (no metrics)"
if [ -n "$METRICS_ADDR" ] && METRICS=$(scrape "$METRICS_ADDR" 2>/dev/null); then
  bucket() { # le -> flushes at or below it
    echo "$METRICS" | grep "^ferry_log_flush_seconds_bucket{topic=\"bench-1k-rate\",le=\"$1\"}" \
      | awk '{print $2}' | head -n1
  }
  F_ALL=$(bucket "+Inf"); F_10=$(bucket "0.01"); F_100=$(bucket "0.1")
  if [ -n "$F_ALL" ]; then
    FLUSH_LINE="ferryd log flushes in the paced run: $F_ALL, of them over 10 ms: $((F_ALL - F_10)), over 100 ms: $((F_ALL - F_100))"
  fi
fi

echo "\$ redis-benchmark -p $REDIS_PORT -c $REDIS_CLIENTS -P 16 -n $MESSAGES -r 100000 --csv xadd bench-stream '*' field <1 KB value>" >&2
run_client redis-benchmark redis-benchmark -p "$REDIS_PORT" -c "$REDIS_CLIENTS" -P 16 \
  -n "$MESSAGES" -r 100000 --csv xadd bench-stream '*' field "$VALUE"
REDIS_CSV=$(cat "$WORK/last.out")
# "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
REDIS_ROW=$(echo "$REDIS_CSV" | tail -n1 | awk -F'","' '{print $2, $3, $5, $7, $8}' | tr -d '"')
read -r R_RPS _ R_P50 R_P99 R_MAX <<<"$REDIS_ROW"
XLEN=$(redis-cli -p "$REDIS_PORT" xlen bench-stream)
[ "$XLEN" = "$MESSAGES" ] || die "redis stream holds $XLEN entries, expected $MESSAGES"

# -- table --------------------------------------------------------------------------
printf '\n%-44s %10s %8s %8s %8s %8s %8s\n' "run (1 KB, fsync before ack)" "msgs/s" "MB/s" "p50 ms" "p99 ms" "p99.9" "max ms"
row() { # label line
  printf '%-44s %10s %8s %8s %8s %8s %8s\n' "$1" \
    "$(echo "$2" | grep -o '[0-9.]* msgs/s' | head -n1 | awk '{print $1}')" \
    "$(echo "$2" | grep -o '[0-9.]* MB/s' | head -n1 | awk '{print $1}')" \
    "$(field "$2" p50)" "$(field "$2" p99)" "$(field "$2" p99.9)" "$(field "$2" max)"
}
row "ferry produce (acks=all, 1 producer)" "$P_LINE"
row "ferry consume" "$C_LINE"
row "ferry produce --rate $RATE (open loop)" "$R_LINE"
printf '%-44s %10s %8s %8s %8s %8s %8s\n' "redis XADD (-P 16 -c $REDIS_CLIENTS, fsync always)" \
  "$(printf '%.0f' "$R_RPS")" "$(awk -v r="$R_RPS" -v s="$SIZE" 'BEGIN {printf "%.1f", r * s / 1e6}')" \
  "$R_P50" "$R_P99" "-" "$R_MAX"
FERRY_RPS=$(echo "$P_LINE" | grep -o '[0-9.]* msgs/s' | head -n1 | awk '{print $1}')
echo "$FLUSH_LINE"
printf '\nferry produce / redis XADD: %sx (target >= 4x)\n' \
  "$(awk -v f="$FERRY_RPS" -v r="$R_RPS" 'BEGIN {printf "%.2f", f / r}')"
