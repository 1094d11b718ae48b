#!/usr/bin/env bash
# `make bazel-test`: builds the op library and runs the C++ op tests with
# Bazel 4 (Debian's bazel-bootstrap), offline. Everything Bazel writes stays
# under build/bazel/. Extra arguments go to `bazel test`; --build-only (first)
# builds the tests without running them.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup_bazel.sh

# The server exits after 10 idle minutes instead of Bazel's default 3 hours.
bazel="bazel --output_user_root=$PWD/build/bazel/root --max_idle_secs=600"
if [[ ${1:-} == --build-only ]]; then
  shift
  exec $bazel build //... "$@"
fi
rc=0
$bazel test --test_output=errors //... "$@" || rc=$?

# Each test's own summary line ("N passed, M failed").
for log in $(find build/bazel/testlogs/ -name test.log 2>/dev/null | sort); do
  test_name=${log#build/bazel/testlogs/}
  echo "${test_name%/test.log}: $(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -1)"
done
exit $rc
