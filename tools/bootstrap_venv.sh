#!/usr/bin/env bash
# Creates the virtual environment with tfcomp's pinned stack, or reuses it
# while the pins (requirements/*.txt and this script) are unchanged.
#   tools/bootstrap_venv.sh [VENV]            install the pinned set
#   tools/bootstrap_venv.sh --resolve [VENV]  resolve base.txt and horovod.txt
#                                             afresh and rewrite constraints.txt
set -euo pipefail
cd "$(dirname "$0")/.."
resolve=0
if [[ ${1:-} == --resolve ]]; then
  resolve=1
  shift
fi
venv=${1:-.venv}
base_python=${PYTHON_BASE:-python3.11}
pins_hash() { cat requirements/*.txt tools/bootstrap_venv.sh | sha256sum | cut -c1-16; }
stamp="$venv/.tfcomp-pins"
if [[ $resolve == 0 && -f $stamp && $(cat "$stamp") == "$(pins_hash)" ]]; then
  exit 0
fi

echo "Creating $venv with the pinned stack (a few minutes on a new machine)"
rm -rf "$venv"
"$base_python" -m venv "$venv"
pip=("$venv/bin/python" -m pip)
constraints=(-c requirements/constraints.txt)
[[ $resolve == 1 ]] && constraints=()
"${pip[@]}" install -q -r requirements/build-tools.txt
"${pip[@]}" install -r requirements/base.txt "${constraints[@]}"

# Horovod compiles against the TensorFlow installed above, so it comes second,
# without build isolation and without a cached wheel that another TensorFlow
# may have built. Its CMake must be the pinned 3.x of build-tools.txt: CMake 4
# rejects Gloo's cmake_minimum_required.
PATH="$PWD/$venv/bin:$PATH" MAKEFLAGS="-j$(nproc)" \
  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
  HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
  "${pip[@]}" install --no-build-isolation --no-cache-dir \
  -r requirements/horovod.txt "${constraints[@]}"
# Load the TensorFlow extension directly, with its errors shown:
# `horovodrun --check-build` probes it in a forked child with all output muted,
# so a failed probe says nothing about why.
if ! "$venv/bin/python" -c '
import horovod.tensorflow as hvd
assert hvd.gloo_built(), "the TensorFlow extension was built without Gloo"
'; then
  echo "Horovod's TensorFlow extension does not load; see the error above and the pip output" >&2
  exit 1
fi
if [[ $resolve == 1 ]]; then
  { echo "# The whole resolved set: written by tools/bootstrap_venv.sh --resolve (make constraints)."
    "${pip[@]}" freeze --exclude-editable | grep -v -i -E '^(cmake|pip|setuptools|wheel)=='
  } > requirements/constraints.txt
fi
pins_hash > "$stamp"
