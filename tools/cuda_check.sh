#!/usr/bin/env bash
# `make cuda-check`: builds the GPU op library (tools/build_gpu_library.sh), then
#   1. loads it in the venv's TensorFlow (CPU-only is fine), runs its CPU kernels
#      and checks that GPU kernels are registered and SASS is there per arch;
#   2. runs every standalone CUDA test that build_gpu_library.sh built from
#      custom_ops/*/cuda_test/*.cu (exit 77 = no CUDA device: skipped).
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

"$PYTHON" - "$LIB" <<'EOF' || die "loading or running $LIB in TensorFlow failed"
import sys
import numpy as np
import tensorflow as tf
from tensorflow.python.framework import kernels

lib = tf.load_op_library(sys.argv[1])
with tf.device("/CPU:0"):
    x = tf.constant([1.5, -2.0, 0.0, -0.0, 3.5, -3.0])
    words, scale = lib.tfcomp_sign_pack(x)
    assert words.numpy().tolist() == [0b11101], words
    np.testing.assert_allclose(scale.numpy(), 10.0 / 6.0, rtol=1e-6)
    s = scale.numpy()
    np.testing.assert_array_equal(lib.tfcomp_sign_unpack(words, scale, 6).numpy(),
                                  [s, -s, s, s, s, -s])
    votes = lib.tfcomp_sign_majority(tf.constant([[0b11101], [0], [0b11101]], tf.uint32), 6)
    np.testing.assert_array_equal(votes.numpy(), [1, -1, 1, 1, 1, -1])

want = {tf.half, tf.bfloat16, tf.float32, tf.float64}
for op in ("TfcompSignPack", "TfcompSignUnpack", "TfcompSignMajority"):
    gpu_types = {tf.dtypes.as_dtype(c.allowed_values.list.type[0])
                 for k in kernels.get_registered_kernels_for_op(op).kernel
                 if k.device_type == "GPU" for c in k.constraint}
    assert gpu_types == want, f"{op}: GPU kernels for {sorted(t.name for t in gpu_types)}"
print(f"cuda_check: library loads in TensorFlow {tf.__version__}, CPU kernels run, "
      f"GPU kernels registered")

# With a GPU, the GPU kernels must agree with the CPU ones: bit for bit, scale
# up to summation order.
if not tf.config.list_physical_devices("GPU"):
    print("cuda_check: no GPU visible to TensorFlow: GPU kernels not run")
    sys.exit(0)
rng = np.random.default_rng(0)
for dtype in sorted(want, key=lambda t: t.name):
    for n in (0, 1, 33, 4097, (1 << 20) + 7):
        x = rng.standard_normal(n)
        x[::7] = np.resize([0.0, -0.0], x[::7].shape)
        if n == 33:
            x[5], x[6] = np.inf, np.nan
        rows = tf.constant(rng.integers(0, 2**32, (3, (n + 31) // 32 + 1), dtype=np.uint32))
        results = []
        for device in ("/CPU:0", "/GPU:0"):
            with tf.device(device):
                words, scale = lib.tfcomp_sign_pack(tf.constant(x, dtype))
                results.append([words, scale,
                                lib.tfcomp_sign_unpack(words, tf.constant(1.5, dtype), n),
                                lib.tfcomp_sign_majority(rows, n, dtype=dtype)])
        (cw, cs, cu, cm), (gw, gs, gu, gm) = [[t.numpy() for t in r] for r in results]
        np.testing.assert_array_equal(cw, gw, f"{dtype.name} n={n} words")
        np.testing.assert_allclose(np.float64(gs), np.float64(cs), rtol=2e-3 if dtype.size == 2 else 1e-5)
        assert cu.tobytes() == gu.tobytes(), f"{dtype.name} n={n} unpack"
        assert cm.tobytes() == gm.tobytes(), f"{dtype.name} n={n} majority"
print("cuda_check: GPU kernels match the CPU kernels")
EOF

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
echo "cuda_check: OK"
