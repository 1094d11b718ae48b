#!/usr/bin/env bash
# `make test` without STACK: the pinned stack's suite, then the suite on the
# current stack with Bazel's op tests beside it.
#
# What the later steps build is built while the pinned suite runs, under Linux's
# SCHED_IDLE policy (chrt --idle): it takes the cycles the suite leaves idle (its
# workers wait on sockets, timeouts and each other) and gives the CPU back as soon
# as a test process wakes. (A 2-worker test beside two compile loops took 4.5 s
# alone, 6.0-6.4 s with the loops at nice 19 and 4.6-5.4 s under SCHED_IDLE.)
# That is Bazel's op tests, and the current stack's environment (its downloads
# and unpacking wait on the network and the disk) and op library, with their logs
# in build/prebuild-bazel.log and build/prebuild-current.log. Bazel's op tests
# then run the same way beside the current stack's suites (build/bazel-test.log).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
# .ci/run waits for this file too.
pinned_built=build/.pinned-op-library-built
rm -f "$pinned_built"
current_log=build/prebuild-current.log
(
  tools/bootstrap_venv.sh --stack current .venv-current
  # After the pinned op library: both builds write tfcomp.egg-info in this tree.
  until [[ -e $pinned_built ]]; do
    kill -0 $$ 2>/dev/null || exit 1
    sleep 2
  done
  chrt --idle 0 make build STACK=current
) > "$current_log" 2>&1 &
current=$!
make build layering netfaults STACK=pinned
touch "$pinned_built"
bazel_log=build/prebuild-bazel.log
PYTHON=.venv/bin/python chrt --idle 0 tools/bazel_test.sh --build-only > "$bazel_log" 2>&1 &
bazel=$!

status=0
make pytest STACK=pinned || status=$?
# A failed background build is retried, and shows its errors, in make bazel-test and
# make test STACK=current.
wait "$bazel" || echo "building Bazel's op tests in the background failed (see $bazel_log)" >&2
bazel_test_log=build/bazel-test.log
chrt --idle 0 make bazel-test STACK=pinned > "$bazel_test_log" 2>&1 &
bazel_test=$!
if ! wait "$current"; then
  cat "$current_log" >&2
  echo "creating .venv-current or its op library failed; its log is above and in $current_log" >&2
  exit 1
fi
grep -v -E '^(WARNING: Location|Looking in|  Downloading|     ━)' "$current_log" || true
[[ $status == 0 ]] && { make test STACK=current || status=$?; }
bazel_status=0
wait "$bazel_test" || bazel_status=$?
cat "$bazel_test_log"
((bazel_status == 0)) || { echo "Bazel's op tests failed; their log is above" >&2; status=$bazel_status; }
exit "$status"
