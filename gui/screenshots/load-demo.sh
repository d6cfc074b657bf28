#!/usr/bin/env bash
# Loads demo data into a running ferryd through its HTTP API, for the
# console screenshots: topics with keyed JSON records and headers, a stream
# group behind on its offsets, a queue group that dead-lettered some jobs.
# With --live SECONDS it then keeps producing and committing (so the
# charts have rates) for that long.
#   gui/screenshots/load-demo.sh http://127.0.0.1:8080 [--live 60]
set -euo pipefail
H=${1:?usage: load-demo.sh HTTP_BASE [--live SECONDS]}
post() { curl -sf -X POST "$H$1" -H 'content-type: application/json' -d "$2" >/dev/null; }

if curl -sf "$H/v1/topics/orders" >/dev/null; then
  echo "load-demo: orders exists, skipping the initial load" >&2
else
post /v1/topics '{"name":"orders","partitions":3}'
post /v1/topics '{"name":"payments","partitions":2}'
post /v1/topics '{"name":"jobs","partitions":1}'
for i in $(seq 1 120); do
  post /v1/topics/orders/messages "{\"key\":\"user-$((i % 17))\",\"value\":{\"order\":$i,\"amount\":$((i * 7 % 300)).50,\"status\":\"new\"},\"headers\":{\"source\":\"web\",\"trace\":\"t-$i\"}}"
done
for i in $(seq 1 40); do
  post /v1/topics/payments/messages "{\"key\":\"pay-$i\",\"value\":\"payment $i settled\"}"
done
for i in $(seq 1 12); do
  post /v1/topics/jobs/messages "{\"key\":\"job-$i\",\"value\":{\"job\":$i,\"kind\":\"resize\"},\"headers\":{\"tenant\":\"acme\"}}"
done
# A stream group that consumed part of orders and payments.
post /v1/groups/billing/offsets '{"offsets":[{"topic":"orders","partition":0,"offset":20},{"topic":"orders","partition":1,"offset":10},{"topic":"orders","partition":2,"offset":30},{"topic":"payments","partition":0,"offset":15},{"topic":"payments","partition":1,"offset":5}]}'
# A queue group: lease the jobs, reject a few with two different errors.
leases=$(curl -sf -X POST "$H/v1/groups/workers/queue/jobs/receive" -d '{"member":"w1","max":12,"waitMs":2000}')
python3 - "$H" "$leases" <<'PY'
import json, sys, urllib.request
h, body = sys.argv[1], json.loads(sys.argv[2])
msgs = body["records"]
for i, m in enumerate(msgs):
    kind = "reject" if i % 3 == 0 else "ack"
    req = {"member": "w1", "partition": m["partition"], "offset": m["offset"],
           "leaseId": m["leaseId"]}
    if kind == "reject":
        req["error"] = "image too large" if i % 2 == 0 else "invalid payload: missing size"
    r = urllib.request.Request(f"{h}/v1/groups/workers/queue/jobs/{kind}",
                               data=json.dumps(req).encode(), method="POST",
                               headers={"content-type": "application/json"})
    urllib.request.urlopen(r).read()
PY
fi

if [ "${2:-}" = "--live" ]; then
  end=$(( $(date +%s) + ${3:-60} ))
  n=1000; c=30
  while [ "$(date +%s)" -lt "$end" ]; do
    for k in 1 2 3 4 5; do
      n=$((n + 1))
      post /v1/topics/orders/messages "{\"key\":\"user-$((n % 17))\",\"value\":{\"order\":$n,\"status\":\"new\"},\"headers\":{\"source\":\"api\"}}"
    done
    c=$((c + 2))
    post /v1/groups/billing/offsets "{\"offsets\":[{\"topic\":\"orders\",\"partition\":2,\"offset\":$c}]}" || true
    sleep 0.2
  done
fi
