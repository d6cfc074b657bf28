#!/usr/bin/env bash
# Runs the chaos test (ferry_chaos_test) again and again with consecutive
# seeds and prints a table of the runs: faults injected, records
# acknowledged, lost, duplicated, out of order, and the result.
#
#   tests/chaos/soak.sh [--runs N] [--seed S] [--faults F] [--partitions P]
#                       [--nodes 3|5] [--bin DIR] [--logs DIR]
#
# Defaults: 10 runs from seed 1, 10 faults each, 6 partitions, 3 voters, binaries in
# build/bin (ferryd too: the run sets FERRY_TEST_FERRYD=DIR/ferryd, so a
# copy keeps running while build/ is rebuilt), logs in a temp dir. A failing
# run keeps its test output and node logs in <logs>/seed-<S>/ (rerun it alone with FERRY_CHAOS_SEED=S).
# Exit status 1 when any run failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=10 seed=1 faults=10 partitions=6 nodes=3 bin=build/bin logs=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --faults) faults=$2; shift 2 ;;
    --partitions) partitions=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --logs) logs=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "soak.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$bin/ferry_chaos_test" ] || { echo "soak.sh: no $bin/ferry_chaos_test (build first)" >&2; exit 2; }
[ -n "$logs" ] || logs=$(mktemp -d /tmp/ferry-chaos.XXXXXX)
mkdir -p "$logs"
fmt='%-8s %-7s %-6s %-7s %-5s %-6s %-8s %-6s %-5s %-11s %-10s %-10s %-12s %-12s %-8s %-7s %-6s %-8s %-12s %-7s %-7s %-8s %s\n'
printf "$fmt" seed faults kills pauses cuts disks acked failed lost duplicated reordered conflicts undelivered \
  commits_back q_acked q_lost dlq dlq_dup redrive_dup h_acked h_lost seconds result
tot_faults=0 tot_kills=0 tot_pauses=0 tot_cuts=0 tot_acked=0 tot_lost=0 tot_dup=0 tot_reord=0 failed_runs=0
tot_qacked=0 tot_qlost=0 tot_dlq=0 tot_dlqdup=0 tot_disks=0 tot_hacked=0 tot_hlost=0
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
for ((i = 0; i < runs; i++)); do
  s=$((seed + i))
  dir="$logs/seed-$s"
  mkdir -p "$dir"
  rc=0
  FERRY_CHAOS_SEED=$s FERRY_CHAOS_FAULTS=$faults FERRY_CHAOS_PARTITIONS=$partitions FERRY_CHAOS_NODES=$nodes \
    FERRY_TEST_LOG_DIR="$dir" FERRY_TEST_FERRYD="$bin/ferryd" "$bin/ferry_chaos_test" > "$dir/test.out" 2>&1 || rc=$?
  line=$(grep '^\[chaos\] summary' "$dir/test.out" | tail -1 || true)
  if [ -z "$line" ]; then
    printf '%-8s %s\n' "$s" "no summary (exit $rc): see $dir/test.out"
    failed_runs=$((failed_runs + 1))
    continue
  fi
  result=$(field result "$line")
  [ "$rc" -eq 0 ] || result=FAIL
  printf "$fmt" "$s" \
    "$(field faults "$line")" "$(field kills "$line")" "$(field pauses "$line")" \
    "$(field cuts "$line")" "$(field disk_fills "$line")" "$(field acked "$line")" "$(field failed "$line")" \
    "$(field lost "$line")" "$(field duplicated "$line")" "$(field reordered "$line")" \
    "$(( $(field epoch_conflicts "$line") + $(cc=$(field controller_conflicts "$line"); echo "${cc:-0}") ))" \
    "$(field group_undelivered "$line")" \
    "$(field commits_backwards "$line")" "$(field queue_acked "$line")" \
    "$(field queue_lost "$line")" "$(field dead_letters "$line")" "$(field dlq_duplicates "$line")" \
    "$(field redrive_duplicates "$line")" "$(field http_acked "$line")" \
    "$(field http_lost "$line")" "$(field seconds "$line")" "$result"
  tot_faults=$((tot_faults + $(field faults "$line")))
  tot_kills=$((tot_kills + $(field kills "$line")))
  tot_pauses=$((tot_pauses + $(field pauses "$line")))
  tot_cuts=$((tot_cuts + $(field cuts "$line")))
  d=$(field disk_fills "$line"); [[ "$d" =~ ^[0-9]+$ ]] && tot_disks=$((tot_disks + d))
  tot_hacked=$((tot_hacked + $(field http_acked "$line")))
  tot_hlost=$((tot_hlost + $(field http_lost "$line") + $(field http_duplicated "$line")))
  tot_acked=$((tot_acked + $(field acked "$line")))
  tot_lost=$((tot_lost + $(field lost "$line")))
  tot_dup=$((tot_dup + $(field duplicated "$line")))
  tot_reord=$((tot_reord + $(field reordered "$line")))
  tot_qacked=$((tot_qacked + $(field queue_acked "$line")))
  tot_qlost=$((tot_qlost + $(field queue_lost "$line")))
  tot_dlq=$((tot_dlq + $(field dead_letters "$line")))
  tot_dlqdup=$((tot_dlqdup + $(field dlq_duplicates "$line") + $(field redrive_duplicates "$line")))
  if [ "$result" = PASS ]; then
    rm -rf "$dir"
  else
    failed_runs=$((failed_runs + 1))
  fi
done
echo "runs $runs, failed $failed_runs; faults $tot_faults (kills $tot_kills, pauses $tot_pauses, cuts $tot_cuts, full disks $tot_disks); acked $tot_acked, lost $tot_lost, duplicated $tot_dup, reordered $tot_reord; queue acked $tot_qacked, lost $tot_qlost, dead letters $tot_dlq, DLQ/redrive duplicates $tot_dlqdup; HTTP acked $tot_hacked, lost or duplicated $tot_hlost; partitions per run $partitions, voters $nodes; logs of failed runs in $logs"
[ "$failed_runs" -eq 0 ]
