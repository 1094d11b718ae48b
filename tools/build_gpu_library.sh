#!/usr/bin/env bash
# Builds build/gpu/_tfcomp_ops.so: every custom_ops/**/*.cc (CPU kernels, op
# registrations, GPU registrations) compiled with g++ -DGOOGLE_CUDA=1, every
# custom_ops/**/*.cu.cc with a CUDA 12 nvcc, linked against TensorFlow. Also
# builds the standalone CUDA tests custom_ops/*/cuda_test/*.cu into
# build/gpu/tests/ (run by tools/cuda_check.sh).
#
#   TFCOMP_CUDA_ARCHS   SM versions to ship SASS for (default "80"; a release:
#                       "70 75 80 86 89 90"). The last one also gets PTX, which
#                       newer GPUs can JIT.
#   TFCOMP_CUDA_HOME    an existing CUDA 12 toolchain; default: a private one
#                       installed into .toolchains/cuda.
#   PYTHON              the venv's python (default .venv/bin/python).
#
# The library is linked without -lcudart: libtensorflow_framework.so.2 exports
# the CUDA runtime entry points, so the same .so loads in a CPU-only TensorFlow.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "build_gpu_library: error: $*" >&2; exit 1; }

export PYTHON=${PYTHON:-.venv/bin/python}
ARCHS=${TFCOMP_CUDA_ARCHS:-80}
OUT=build/gpu
if [[ -z ${TFCOMP_CUDA_HOME:-} ]]; then
  tools/install_cuda_toolchain.sh .toolchains/cuda
  CUDA_HOME=$PWD/.toolchains/cuda
else
  CUDA_HOME=$TFCOMP_CUDA_HOME
fi
NVCC=$CUDA_HOME/bin/nvcc
[[ -x $NVCC ]] || die "no nvcc at $NVCC"
"$NVCC" --version | grep -q 'release 12\.' \
  || die "$NVCC is not CUDA 12 (TensorFlow 2.15 is built against CUDA 12): $("$NVCC" --version | tail -1)"

mapfile -t TF_FLAGS < <(TF_CPP_MIN_LOG_LEVEL=3 "$PYTHON" -c '
import tensorflow as tf
print(" ".join(tf.sysconfig.get_compile_flags()))
print(" ".join(tf.sysconfig.get_link_flags()))') || die "$PYTHON cannot import tensorflow"
read -ra TF_CFLAGS <<<"${TF_FLAGS[0]}"
read -ra TF_LFLAGS <<<"${TF_FLAGS[1]}"

GENCODE=()
last=${ARCHS##* }
for arch in $ARCHS; do
  [[ $arch =~ ^[0-9]+$ ]] || die "TFCOMP_CUDA_ARCHS must list SM numbers like '70 80 90', got '$arch'"
  code=sm_$arch
  [[ $arch == "$last" ]] && code="[sm_$arch,compute_$arch]"
  GENCODE+=(-gencode "arch=compute_$arch,code=$code")
done
# Warnings from TensorFlow's own headers under nvcc: unused [[nodiscard]] results (2810),
# partially overridden virtuals (611), and g++'s noinline-after-inline (-Wattributes).
NVCC_FLAGS=(-c -x cu -DGOOGLE_CUDA=1 -DNDEBUG -Xcompiler -fPIC --expt-relaxed-constexpr
  -std=c++17 -O3 -I"$PWD" "${TF_CFLAGS[@]}" -diag-suppress 611,2810 -Xcompiler -Wno-attributes
  --threads 0 "${GENCODE[@]}")
CXX_FLAGS=(-c -fPIC -O3 -DNDEBUG -DGOOGLE_CUDA=1 -I"$PWD" "${TF_CFLAGS[@]}" -Wno-attributes)

mapfile -t CU_SRCS < <(find custom_ops -name '*.cu.cc' | sort)
mapfile -t CC_SRCS < <(find custom_ops -name '*.cc' ! -name '*.cu.cc' ! -path '*/cc/tests/*' | sort)
((${#CC_SRCS[@]})) || die "no sources under custom_ops/"

rm -rf "$OUT/obj" "$OUT/tests" "$OUT/_tfcomp_ops.so"
mkdir -p "$OUT/obj" "$OUT/tests"
echo "build_gpu_library: ${#CC_SRCS[@]} .cc + ${#CU_SRCS[@]} .cu.cc, CUDA archs: $ARCHS"
start=$SECONDS
SRCS=("${CU_SRCS[@]}" "${CC_SRCS[@]}")
OBJS=()
# Waits until fewer than nproc background jobs run.
wait_for_a_slot() {
  while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n || true; done
}

# Up to nproc background jobs; a .o appears only when its compile succeeded.
for src in "${SRCS[@]}"; do
  wait_for_a_slot
  obj=$OUT/obj/$(echo "${src#custom_ops/}" | tr / _).o
  OBJS+=("$obj")
  if [[ $src == *.cu.cc ]]; then cmd=("$NVCC" "${NVCC_FLAGS[@]}"); else cmd=(g++ "${CXX_FLAGS[@]}"); fi
  ("${cmd[@]}" "$src" -o "$obj.tmp" >"$obj.log" 2>&1 && mv "$obj.tmp" "$obj") &
done
wait
failed=0
for i in "${!SRCS[@]}"; do
  if [[ ! -f ${OBJS[$i]} ]]; then
    failed=1
    echo "---- compiling ${SRCS[$i]} failed:" >&2
    cat "${OBJS[$i]}.log" >&2
  fi
done
((failed == 0)) || die "compilation failed"
echo "build_gpu_library: compiled in $((SECONDS - start)) s"

g++ -shared -o "$OUT/_tfcomp_ops.so" "${OBJS[@]}" "${TF_LFLAGS[@]}" -Wl,--no-undefined \
  || die "link failed"
echo "build_gpu_library: wrote $OUT/_tfcomp_ops.so"

# The standalone tests, up to nproc at a time as above; each writes its log beside its object.
build_standalone_test() {
  local src=$1 name
  name=$(basename "$src" .cu)
  "$NVCC" -c -x cu -std=c++17 -O2 -I"$PWD" --expt-relaxed-constexpr --threads 0 "${GENCODE[@]}" "$src" \
    -o "$OUT/obj/$name.o" || { echo "compiling $src failed"; return 1; }
  g++ -o "$OUT/tests/$name" "$OUT/obj/$name.o" -L"$CUDA_HOME/lib64" -l:libcudart.so.12 \
    -Wl,-rpath,"$CUDA_HOME/lib64" || { echo "linking $src failed (libcudart.so.12 in $CUDA_HOME/lib64?)"; return 1; }
}
TEST_SRCS=()
for src in custom_ops/*/cuda_test/*.cu; do
  [[ -e $src ]] || continue
  TEST_SRCS+=("$src")
  wait_for_a_slot
  build_standalone_test "$src" >"$OUT/obj/$(basename "$src" .cu).test.log" 2>&1 &
done
wait
for src in "${TEST_SRCS[@]}"; do
  name=$(basename "$src" .cu)
  if [[ ! -x $OUT/tests/$name ]]; then
    cat "$OUT/obj/$name.test.log" >&2
    die "building the standalone test $src failed"
  fi
  echo "build_gpu_library: wrote $OUT/tests/$name"
done
