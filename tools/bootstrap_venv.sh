#!/usr/bin/env bash
# Creates the virtual environment with one of tfcomp's pinned stacks, or reuses
# it while that stack's pins (its requirements files and this script) are
# unchanged.
#   tools/bootstrap_venv.sh [--stack pinned|current] [VENV]
#       install the set: pinned (requirements/*.txt: TensorFlow 2.15.1, Horovod)
#       or current (requirements/current/*.txt: TensorFlow 2.21, Keras 3, tf-keras)
#   tools/bootstrap_venv.sh --resolve [--stack ...] [VENV]
#       resolve the stack's base.txt (and horovod.txt) afresh and rewrite its
#       constraints.txt
set -euo pipefail
cd "$(dirname "$0")/.."
resolve=0
stack=pinned
while [[ ${1:-} == --* ]]; do
  case $1 in
    --resolve) resolve=1; shift ;;
    --stack) stack=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
case $stack in
  pinned) pins=requirements ;;
  current) pins=requirements/current ;;
  *) echo "unknown stack '$stack' (pinned or current)" >&2; exit 2 ;;
esac
venv=${1:-.venv}
base_python=${PYTHON_BASE:-python3.11}
pins_hash() { cat "$pins"/*.txt requirements/build-tools.txt tools/bootstrap_venv.sh | sha256sum | cut -c1-16; }
stamp="$venv/.tfcomp-pins"
if [[ $resolve == 0 && -f $stamp && $(cat "$stamp") == "$(pins_hash)" ]]; then
  exit 0
fi

echo "Creating $venv with the $stack stack (a few minutes on a new machine)"
rm -rf "$venv"
"$base_python" -m venv "$venv"
pip=("$venv/bin/python" -m pip)
constraints=(-c "$pins/constraints.txt")
[[ $resolve == 1 ]] && constraints=()
"${pip[@]}" install -q -r requirements/build-tools.txt
"${pip[@]}" install -r "$pins/base.txt" "${constraints[@]}"
write_constraints() {
  { echo "# The whole resolved set: written by tools/bootstrap_venv.sh --resolve --stack $stack (make constraints STACK=$stack)."
    "${pip[@]}" freeze --exclude-editable | grep -v -i -E '^(cmake|pip|setuptools|wheel)=='
  } > "$pins/constraints.txt"
}
if [[ $stack == current ]]; then  # no Horovod: 0.28.1 does not build against TensorFlow 2.21
  [[ $resolve == 1 ]] && write_constraints
  pins_hash > "$stamp"
  exit 0
fi

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
[[ $resolve == 1 ]] && write_constraints
pins_hash > "$stamp"
