#!/usr/bin/env bash
# `make test` without STACK: the pinned stack's suite and Bazel op tests, then the
# suite on the current stack.
#
# What the later steps build is built while the pinned suite runs, at the lowest
# CPU priority (nice 19): it takes the cycles the suite leaves idle (its workers
# wait on sockets, timeouts and each other) and yields them otherwise. That is
# Bazel's op tests, and the current stack's environment (its downloads and
# unpacking wait on the network and the disk) and op library, with their logs in
# build/prebuild-bazel.log and build/prebuild-current.log.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
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
  nice -n 19 make build STACK=current
) > "$current_log" 2>&1 &
current=$!
make build layering netfaults STACK=pinned
touch "$pinned_built"
bazel_log=build/prebuild-bazel.log
PYTHON=.venv/bin/python nice -n 19 tools/bazel_test.sh --build-only > "$bazel_log" 2>&1 &
bazel=$!

status=0
make pytest STACK=pinned || status=$?
# A failed background build is retried, and shows its errors, in make bazel-test and
# make test STACK=current.
wait "$bazel" || echo "building Bazel's op tests in the background failed (see $bazel_log)" >&2
[[ $status == 0 ]] && { make bazel-test STACK=pinned || status=$?; }
if ! wait "$current"; then
  cat "$current_log" >&2
  echo "creating .venv-current or its op library failed; its log is above and in $current_log" >&2
  exit 1
fi
grep -v -E '^(WARNING: Location|Looking in|  Downloading|     ━)' "$current_log" || true
[[ $status == 0 ]] || exit "$status"
make test STACK=current
