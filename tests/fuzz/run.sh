#!/usr/bin/env bash
# Runs the libFuzzer harnesses (tests/fuzz/README.md) on their seed corpora.
#
#   tests/fuzz/run.sh [--bin DIR] [--runs N | --seconds S] [--keep DIR] [HARNESS...]
#
#   --bin DIR      where the fuzz_* binaries are (default build/fuzz/bin)
#   --runs N       inputs per harness (default: the fixed counts ctest uses)
#   --seconds S    run each harness this long instead (a soak)
#   --keep DIR     keep the corpus the run grows in DIR/<harness> (default: a
#                  temp dir, deleted); the seeds in tests/fuzz/corpus are never
#                  written to
#   HARNESS        record_batch decompress segment_recovery raft http_json
#                  lmdb_rows kafka_requests http_requests
#                  (default: all)
#
# A harness that finds a crash, a sanitizer report or a broken property
# stops; its input is saved as <artifacts>/crash-<sha1> (printed), and the
# script exits 1 after the others ran. Rerun one input with
#   build/fuzz/bin/fuzz_<harness> <file>
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$here/../../build/fuzz/bin" runs="" seconds="" keep=""
harnesses=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) harnesses+=("$1"); shift ;;
  esac
done
[ ${#harnesses[@]} -gt 0 ] || harnesses=(record_batch decompress segment_recovery raft http_json lmdb_rows
                                         kafka_requests http_requests)
# Inputs per harness in a default run: about 5-15 s each with ASan on 2 cores.
declare -A default_runs=([record_batch]=50000 [decompress]=50000 [segment_recovery]=3000
                         [raft]=20000 [http_json]=20000 [lmdb_rows]=50000
                         [kafka_requests]=50000 [http_requests]=1000)
# Where a harness's UBSan checks are recoverable (CMakeLists.txt: the code
# that spawns CAF actors), a report still ends the run, unless it is one of
# CAF's own (tests/sanitize/ubsan.supp).
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$here/../sanitize/ubsan.supp"
work=$(mktemp -d /tmp/ferry-fuzz.XXXXXX)
artifacts="$work/artifacts"
mkdir -p "$artifacts"
# The work dir goes unless it holds a failing input.
cleanup() { if [ -z "$(ls -A "$artifacts")" ]; then rm -rf "$work"; fi; }
trap cleanup EXIT
failed=0
for h in "${harnesses[@]}"; do
  exe="$bin/fuzz_$h"
  seeds="$here/corpus/$h"
  if [ ! -x "$exe" ] || [ ! -d "$seeds" ]; then
    echo "run.sh: no harness $h ($exe, $seeds)" >&2
    exit 2
  fi
  grown="${keep:-$work/corpus}/$h"
  mkdir -p "$grown"
  limit=(-runs="${runs:-${default_runs[$h]:-10000}}")
  [ -n "$seconds" ] && limit=(-max_total_time="$seconds")
  log="$work/$h.log"
  rc=0
  "$exe" "${limit[@]}" -seed=1 -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$artifacts/$h-" -print_final_stats=1 "$grown" "$seeds" > "$log" 2>&1 || rc=$?
  stats=$(grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb)' "$log" | sed 's/stat:://; s/: */ /' | tr '\n' ' ')
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
  if [ "$rc" -eq 0 ]; then
    echo "fuzz $h: ok ($stats$cov)"
  else
    failed=1
    echo "fuzz $h: FAILED (exit $rc); input saved in $artifacts, log $log:"
    grep -E 'ERROR|SUMMARY|violated|runtime error|deadly|Test unit written' "$log" | head -20
  fi
done
exit $failed
