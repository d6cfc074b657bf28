#!/usr/bin/env bash
# Writes tests/broker/testdata/legacy_single_node_datadir.tar.gz: the data
# dir of a single-node ferryd from before "one metadata path" (commit
# af7074b and earlier), whose topics lived in the LMDB sub-databases
# cluster.topics / cluster.counters (local_metadata) instead of the Raft log.
# LegacyDataDir.* in tests/integration/single_node_test.cpp opens a copy of
# it with today's ferryd and checks what this script put in.
#
# Usage: tests/tools/make_legacy_datadir.sh BIN_DIR OUT.tar.gz
#   BIN_DIR holds ferryd and ferryctl built from af7074b (git worktree add
#   /tmp/old af7074b && cmake -S /tmp/old -B /tmp/old/build && cmake
#   --build /tmp/old/build --target ferryd ferryctl).
#
# What the data dir holds (the test's expectations; keep them in step):
#   topic orders: 3 partitions, retention.ms=86400000, 30 records
#     "order-<i>" keyed k<i%10> (i = 0..29)
#   topic events: created with 1 partition, grown to 2; 6 records
#     "job-0".."job-3", "bad-4", "bad-5" produced to partition 0, then
#     "late-0".."late-2" to partition 1 after the queue group ran
#   stream group billing on orders: 12 records consumed and committed
#   queue group jobs on events (max attempts 1): job-* acked, bad-*
#     dead-lettered to events.jobs.dlq; late-* never received (pending)
#   producer ids: the idempotent ferryctl producers reserved a block
set -euo pipefail
bin=${1:?usage: make_legacy_datadir.sh BIN_DIR OUT.tar.gz}
out=${2:?usage: make_legacy_datadir.sh BIN_DIR OUT.tar.gz}
out=$(realpath -m "$out")
work=$(mktemp -d)
pid=
cleanup() {
  [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin/ferryd" --data-dir "$work/data" --port "$port" --metrics-port -1 \
  --http-port -1 --log-level warn >"$work/ferryd.out" 2>&1 &
pid=$!
for _ in $(seq 100); do
  grep -q "^listening on" "$work/ferryd.out" && break
  sleep 0.1
done
grep -q "^listening on" "$work/ferryd.out"
ctl() { "$bin/ferryctl" --broker "127.0.0.1:$port" "$@"; }
ctl topic create orders --partitions 3 --config retention.ms=86400000
ctl topic create events --partitions 1
for i in $(seq 0 29); do echo "k$((i % 10))|order-$i"; done |
  ctl produce orders --key-separator '|'
printf 'job-0\njob-1\njob-2\njob-3\nbad-4\nbad-5\n' |
  ctl produce events --partition 0
ctl topic alter events --partitions 2
ctl consume orders --group billing --from-beginning --max 12 >/dev/null
ctl work events --group jobs --mode queue --max-attempts 1 --max-idle 3s \
  --exec 'v=$(cat); case "$v" in bad-*) exit 2;; esac; exit 0'
printf 'late-0\nlate-1\nlate-2\n' | ctl produce events --partition 1
ctl --json group describe billing >"$work/billing.json"
ctl --json dlq list >"$work/dlq.json"
cat "$work/billing.json" "$work/dlq.json"
kill -TERM "$pid"
wait "$pid" || true
pid=
rm -f "$work/data/meta/lock.mdb" # rebuilt by LMDB on open
tar -C "$work" -czf "$out" data
ls -l "$out"
