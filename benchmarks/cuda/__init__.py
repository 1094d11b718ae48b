"""The CUDA kernel benchmark: run_on_gpu.sh builds and runs kernels_bench.cu on a GPU
machine; `python -m benchmarks.cuda.report` tables and plots what it wrote."""
