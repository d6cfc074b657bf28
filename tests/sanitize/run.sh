#!/usr/bin/env bash
# Builds Ferry's core libraries and their unit, actor and client tests with
# AddressSanitizer + UndefinedBehaviorSanitizer and runs them. Exit status 0
# only when every test passes and no sanitizer reports anything beyond the
# suppressions in this folder (see README.md).
#
#   tests/sanitize/run.sh                 # build-asan/ next to the repo's build/
#   tests/sanitize/run.sh --dir D         # another build directory
#   tests/sanitize/run.sh --tests "ferry_codec_test ferry_log_test"
#
# A full run takes ~25 minutes on 2 cores (most of it the build; the core
# unit tests alone, without ferry_actor_test/ferry_client_test, ~10).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dir="$repo/build-asan"
tests="ferry_codec_test ferry_log_test ferry_lmdb_test ferry_model_test ferry_queue_test ferry_raft_test ferry_client_test ferry_actor_test"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --tests) tests="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

# Recoverable checks: UBSan's suppressions apply only to those; a report that
# is not suppressed still fails the run (the logs are searched below).
flags="-Og -g -fsanitize=address,undefined -fno-omit-frame-pointer"
cmake -S "$repo" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
# shellcheck disable=SC2086
cmake --build "$dir" -j2 --target $tests

# Full stacks for leaks: the fast unwinder stops inside libstdc++, which
# has no frame pointers.
export ASAN_OPTIONS="detect_leaks=1:fast_unwind_on_malloc=0"
export UBSAN_OPTIONS="suppressions=$here/ubsan.supp:print_stacktrace=1:print_suppressions=0"
logs="$dir/sanitize-logs"
mkdir -p "$logs"
failed=0
for t in $tests; do
  log="$logs/$t.log"
  if "$dir/bin/$t" >"$log" 2>&1; then rc=0; else rc=$?; fi
  reports=$(grep -cE "runtime error|ERROR: AddressSanitizer|ERROR: LeakSanitizer" "$log" || true)
  summary=$(grep -E '^\[  (PASSED|FAILED)  \]' "$log" | head -2 | tr '\n' ' ')
  echo "$t: exit $rc, sanitizer reports $reports; $summary"
  if [[ $rc -ne 0 || $reports -ne 0 ]]; then
    failed=1
    grep -E -A12 "runtime error|ERROR: AddressSanitizer|ERROR: LeakSanitizer" "$log" | head -60
  fi
done
exit $failed
