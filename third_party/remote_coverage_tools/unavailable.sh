#!/bin/sh
echo "bazel coverage is not available in tfcomp's offline Bazel build" >&2
exit 1
