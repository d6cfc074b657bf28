#!/usr/bin/env bash
# `cmake --install` of a build into a temporary prefix, then a program
# outside the tree (tests/deploy/client_example) finds the client library
# with find_package(Ferry), links Ferry::client, and produces and consumes
# 1,000 records through a real ferryd started from the same prefix.
#
#   install_client_test.sh --build BUILD_DIR --source SOURCE_DIR
#
# Everything lives in a temp dir that is removed on the way out, and the
# ferryd it starts is stopped, also on failure.
set -euo pipefail

build="" source=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --source) source=$2; shift 2 ;;
    *) echo "usage: $0 --build DIR --source DIR" >&2; exit 2 ;;
  esac
done
[[ -d $build && -d $source ]] || { echo "usage: $0 --build DIR --source DIR" >&2; exit 2; }

work=$(mktemp -d /tmp/ferry-install-test.XXXXXX)
pid=""
cleanup() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [[ -f $work/ferryd.log ]] && tail -20 "$work/ferryd.log" >&2; exit 1; }
step() { echo "== $*"; }

prefix=$work/prefix
step "cmake --install into $prefix"
cmake --install "$build" --prefix "$prefix" --strip > "$work/install.log" || { cat "$work/install.log"; fail "install"; }
for f in bin/ferryd bin/ferryctl \
         lib/libferry_client.a lib/libferry_protocol.a lib/libferry_core.a \
         include/ferry/actors/client/producer.hpp include/ferry/actors/client/admin.hpp \
         include/ferry/actors/protocol/interfaces.hpp include/ferry/broker/messages.hpp \
         lib/cmake/Ferry/FerryConfig.cmake lib/cmake/Ferry/FerryTargets.cmake \
         lib/systemd/system/ferryd.service share/doc/ferry/examples/ferryd.conf.example \
         share/ferry/prometheus/alerts.yml share/ferry/grafana/ferry-overview.json; do
  [[ -e $prefix/$f ]] || fail "not installed: $f"
done
grep -q "^ExecStart=$prefix/bin/ferryd " "$prefix/lib/systemd/system/ferryd.service" \
  || fail "the unit does not start the installed ferryd: $(grep ExecStart "$prefix/lib/systemd/system/ferryd.service")"
# The server's internals are not part of the client package.
for f in include/ferry/actors/server include/ferry/broker/lmdb.hpp lib/libferry_server.a; do
  [[ ! -e $prefix/$f ]] || fail "installed but internal: $f"
done

step "build the out-of-tree client against the installed package"
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$source/tests/deploy/client_example" -B "$work/example" "${gen[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" > "$work/example-cmake.log" 2>&1 \
  || { cat "$work/example-cmake.log"; fail "configure the example"; }
cmake --build "$work/example" > "$work/example-build.log" 2>&1 \
  || { tail -40 "$work/example-build.log"; fail "build the example"; }

step "start the installed ferryd on free ports"
read -r port http_port metrics_port < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
"$prefix/bin/ferryd" --data-dir "$work/data" --host 127.0.0.1 --port "$port" \
  --http-port "$http_port" --metrics-port "$metrics_port" > "$work/ferryd.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || fail "ferryd exited"
  sleep 0.1
done

step "produce and consume through Ferry::client"
out=$(timeout 120 "$work/example/client_example" "127.0.0.1:$port" installed-orders 1000 2>&1) \
  || fail "client_example: $out"
echo "$out"
[[ $out == "ok: produced 1000, consumed 1000" ]] || fail "unexpected output: $out"
echo "install_client_test: ok"
