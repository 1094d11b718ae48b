#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and a CUDA toolkit (no TensorFlow needed):
#   1. builds every standalone CUDA test (custom_ops/*/cuda_test/*.cu) and
#      benchmarks/cuda/kernels_bench.cu for this GPU's architecture;
#   2. runs the tests;
#   3. runs the benchmark into OUTDIR/cuda_kernels.jsonl;
#   4. runs the tests again under compute-sanitizer (memcheck, racecheck,
#      synccheck); a failing tool's report ends up in run.log.
# Everything it prints also goes to OUTDIR/run.log. The tables and plots are made
# on any machine afterwards: python -m benchmarks.cuda.report.
#
#   benchmarks/cuda/run_on_gpu.sh OUTDIR [REPS]
#   NVCC=/path/to/nvcc benchmarks/cuda/run_on_gpu.sh OUTDIR   # another toolkit
#   SANITIZER_TOOLS="memcheck" ...   # fewer sanitizer passes (racecheck of the
#                                    # sparse test alone takes about 6 minutes)
set -uo pipefail
cd "$(dirname "$0")/../.."

OUTDIR=${1:?usage: $0 OUTDIR [REPS]}
REPS=${2:-31}
mkdir -p "$OUTDIR"
exec > >(tee "$OUTDIR/run.log") 2>&1

NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x $NVCC ]] || { echo "run_on_gpu: no nvcc (set NVCC)"; exit 1; }
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
SANITIZER=$(command -v compute-sanitizer || ls "$(dirname "$NVCC")"/compute-sanitizer 2>/dev/null || true)
echo "== $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader)"
echo "== $("$NVCC" --version | tail -2 | head -1), sm_$ARCH"

BUILD=$(mktemp -d)
FLAGS=(-std=c++17 -O3 -I. --expt-relaxed-constexpr -lineinfo -gencode "arch=compute_$ARCH,code=sm_$ARCH")
status=0
pids=()
for src in custom_ops/*/cuda_test/*.cu benchmarks/cuda/kernels_bench.cu; do
  name=$(basename "$src" .cu)
  ("$NVCC" "${FLAGS[@]}" "$src" -o "$BUILD/$name" -lcublas >"$BUILD/$name.log" 2>&1 \
    || { echo "== build of $src FAILED:"; cat "$BUILD/$name.log"; exit 1; }) &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
((status == 0)) || exit 1
echo "== built in $BUILD"

for test in "$BUILD"/*_core_test; do
  start=$SECONDS
  "$test" || { echo "== $(basename "$test") FAILED"; status=1; }
  echo "== $(basename "$test"): $((SECONDS - start)) s"
done

"$BUILD/kernels_bench" "$REPS" >"$OUTDIR/cuda_kernels.jsonl" || { echo "== kernels_bench FAILED"; status=1; }
echo "== kernels_bench: $(wc -l <"$OUTDIR/cuda_kernels.jsonl") measurements"

# Last, as the slowest: the tests under the sanitizer's tools.
for test in "$BUILD"/*_core_test; do
  name=$(basename "$test")
  [[ -n $SANITIZER ]] || { echo "== no compute-sanitizer: $name not checked by it"; continue; }
  for tool in ${SANITIZER_TOOLS:-memcheck racecheck synccheck}; do
    start=$SECONDS
    if "$SANITIZER" --tool "$tool" --error-exitcode 3 "$test" >"$BUILD/$name.$tool.log" 2>&1; then
      echo "== $name under compute-sanitizer $tool: clean ($((SECONDS - start)) s)"
    else
      echo "== $name under compute-sanitizer $tool: ERRORS"; tail -30 "$BUILD/$name.$tool.log"
      status=1
    fi
  done
done
exit $status
