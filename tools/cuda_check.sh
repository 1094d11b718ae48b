#!/usr/bin/env bash
# `make cuda-check`: builds the GPU op library (tools/build_gpu_library.sh), then
#   1. checks SASS per arch and GPU kernel registrations, and runs the Python op
#      tests against it (its CPU kernels here; its GPU kernels too on a GPU);
#   2. runs every standalone CUDA test that build_gpu_library.sh built from
#      custom_ops/*/cuda_test/*.cu (exit 77 = no CUDA device: skipped);
#   3. compiles the GPU benchmark benchmarks/cuda/kernels_bench.cu.
# Same environment variables as build_gpu_library.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "cuda_check: error: $*" >&2; exit 1; }

export PYTHON=${PYTHON:-.venv/bin/python}
export TF_CPP_MIN_LOG_LEVEL=3
ARCHS=${TFCOMP_CUDA_ARCHS:-80}
CUDA_HOME=${TFCOMP_CUDA_HOME:-$PWD/.toolchains/cuda}
OUT=build/gpu
LIB=$OUT/_tfcomp_ops.so

tools/build_gpu_library.sh

elfs=$("$CUDA_HOME/bin/cuobjdump" --list-elf "$LIB")
for arch in $ARCHS; do
  grep -q "\.sm_$arch\.cubin" <<<"$elfs" || die "$LIB holds no SASS for sm_$arch"
done
echo "cuda_check: SASS present for sm_{${ARCHS// /,}}"

"$PYTHON" - "$LIB" <<'EOF' || die "$LIB does not register GPU kernels for every op and dtype"
import sys
import tensorflow as tf
from tensorflow.python.framework import kernels

tf.load_op_library(sys.argv[1])
floats = {tf.half, tf.bfloat16, tf.float32, tf.float64}
sign_ops = ("TfcompSignPack", "TfcompSignEfPack", "TfcompSignUnpack", "TfcompSignMajority", "TfcompSignScaledSum")
sparse_ops = ("TfcompHashSelect", "TfcompSparseDecode", "TfcompScaleAt", "TfcompSelectLargest")
lowrank_ops = ("TfcompLowRankResidual", "TfcompLowRankProduct", "TfcompLowRankCompensate", "TfcompLowRankProject")
for op in sign_ops + ("TfcompSampledThreshold",) + lowrank_ops + sparse_ops:
    # One (T, Tindex) pair per GPU kernel; only the sparse ops have a Tindex.
    gpu_types = {tuple(tf.dtypes.as_dtype(c.allowed_values.list.type[0]).name
                       for c in sorted(k.constraint, key=lambda c: c.name))
                 for k in kernels.get_registered_kernels_for_op(op).kernel
                 if k.device_type == "GPU"}
    indices = ("int32", "int64") if op in sparse_ops else (None,)
    want = {(t.name, i) if i else (t.name,) for t in floats for i in indices}
    assert gpu_types == want, f"{op}: GPU kernels for {sorted(gpu_types)}"
# TfcompCastDivide: one GPU kernel per (DstT, SrcT) pair.
cast_types = {tuple(tf.dtypes.as_dtype(c.allowed_values.list.type[0]).name
                    for c in sorted(k.constraint, key=lambda c: c.name))
              for k in kernels.get_registered_kernels_for_op("TfcompCastDivide").kernel
              if k.device_type == "GPU"}
assert cast_types == {(d.name, s.name) for d in floats for s in floats}, f"TfcompCastDivide: {sorted(cast_types)}"
print(f"cuda_check: GPU kernels registered, library loads in TensorFlow {tf.__version__}")
EOF

# The op tests against the GPU build. On a GPU machine, every op test: the GPU kernels
# against the CPU ones. Without a GPU the build's CPU kernels are the CPU build's own
# sources (its GOOGLE_CUDA blocks only register GPU kernels), which `make test` runs in
# full: here the library's tests and every op against its NumPy reference (the property
# tests), in two test processes.
if [[ -e /dev/nvidia0 ]]; then
  op_tests=(tests/ops/test_sign.py tests/ops/test_sparse.py tests/ops/test_select.py tests/ops/test_lowrank.py
            tests/ops/test_cast.py)
else
  op_tests=(-n 2 tests/ops/test_library.py tests/ops/test_properties.py)
fi
TFCOMP_OPS_LIBRARY=$LIB "$PYTHON" -m pytest -q -p no:cacheprovider "${op_tests[@]}" \
  || die "the op tests fail against $LIB"

for test in "$OUT"/tests/*; do
  [[ -x $test ]] || continue
  rc=0
  "$test" || rc=$?
  case $rc in
    0) echo "cuda_check: $(basename "$test") passed" ;;
    77) echo "cuda_check: $(basename "$test") skipped (no CUDA device)" ;;
    *) die "$(basename "$test") failed (exit $rc)" ;;
  esac
done
# The GPU benchmark calls the same launchers: compiled here (not run), so that a
# launcher's new signature cannot leave it broken until a GPU is lent.
"$CUDA_HOME/bin/nvcc" -c -x cu -std=c++17 -O2 -I"$PWD" --expt-relaxed-constexpr --threads 0 \
  -gencode "arch=compute_${ARCHS%% *},code=sm_${ARCHS%% *}" benchmarks/cuda/kernels_bench.cu \
  -o "$OUT/obj/kernels_bench.o" || die "benchmarks/cuda/kernels_bench.cu does not compile"
echo "cuda_check: benchmarks/cuda/kernels_bench.cu compiles"
echo "cuda_check: OK"
