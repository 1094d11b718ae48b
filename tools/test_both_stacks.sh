#!/usr/bin/env bash
# `make test` without STACK: the pinned stack's suite and Bazel op tests, then the
# suite on the current stack. The current stack's environment is created
# while the pinned one is built and tested: its downloads and unpacking wait on
# the network and the disk more than on the CPUs (about 90 s on a new machine).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
log=build/venv-current.log
tools/bootstrap_venv.sh --stack current .venv-current > "$log" 2>&1 &
current=$!
status=0
make pytest bazel-test STACK=pinned || status=$?
if ! wait "$current"; then
  cat "$log" >&2
  echo "creating .venv-current failed; its log is above and in $log" >&2
  exit 1
fi
grep -v -E '^(WARNING: Location|Looking in|  Downloading|     ━)' "$log" || true
[[ $status == 0 ]] || exit "$status"
make test STACK=current
