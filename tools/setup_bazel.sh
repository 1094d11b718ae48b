#!/usr/bin/env bash
# Prepares the offline Bazel build: installs Debian's bazel-bootstrap (Bazel
# 4.2.3, with a JDK) if bazel is missing, and links the pip TensorFlow into the
# local repository @tensorflow_pip at build/bazel/tensorflow_pip. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"

if ! command -v bazel >/dev/null; then
  sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
  apt-cache show bazel-bootstrap >/dev/null 2>&1 || $sudo apt-get update
  $sudo env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends bazel-bootstrap
fi

tf_dirs=$("$PYTHON" -c 'import tensorflow as tf
print(tf.sysconfig.get_include()); print(tf.sysconfig.get_lib())' 2>/dev/null) ||
  { echo "setup_bazel: cannot import tensorflow with $PYTHON" >&2; exit 1; }
repo=build/bazel/tensorflow_pip
mkdir -p "$repo"
ln -sfn "$(sed -n 1p <<<"$tf_dirs")" "$repo/include"
ln -sfn "$(sed -n 2p <<<"$tf_dirs")" "$repo/lib"
echo "setup_bazel: $(command -v bazel), @tensorflow_pip -> $(readlink "$repo/lib")"
