#!/usr/bin/env bash
# `make sanitize`: builds the op library and the C++ op and core tests with
# AddressSanitizer and UndefinedBehaviorSanitizer (.bazelrc's --config=sanitize)
# and runs the tests. Everything Bazel writes stays under build/sanitize/, apart
# from the regular build's, so neither rebuilds the other. Extra arguments go to
# `bazel test`.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup_bazel.sh

bazel="bazel --output_user_root=$PWD/build/sanitize/root --max_idle_secs=600"
rc=0
$bazel test --config=sanitize --test_output=errors //... "$@" || rc=$?

for log in $(find build/sanitize/testlogs/ -name test.log 2>/dev/null | sort); do
  test_name=${log#build/sanitize/testlogs/}
  echo "${test_name%/test.log}: $(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -1)"
done
exit $rc
