# tfcomp's entry points. Every target creates the pinned environment first
# (.venv, reused while the pins are unchanged) and builds what it needs.
SHELL := /bin/bash
VENV ?= .venv
PYTHON := $(VENV)/bin/python
PINS_STAMP := $(VENV)/.tfcomp-pins
OP_LIBRARY := tfcomp/_tfcomp_ops.so
OP_SOURCES := $(shell find custom_ops -name '*.cc' -o -name '*.h') setup.py
CUDA_ARCHS ?= 70 75 80 86 89 90
export TF_CPP_MIN_LOG_LEVEL ?= 3
export PYTHON

.PHONY: venv constraints build demo test pytest bazel-test sanitize cuda-check build-gpu bench clean

venv:
	@tools/bootstrap_venv.sh $(VENV)

$(PINS_STAMP): venv

# Re-resolves requirements/base.txt and horovod.txt and rewrites constraints.txt.
constraints:
	tools/bootstrap_venv.sh --resolve $(VENV)

# The op library, compiled by setup.py (g++ with tf.sysconfig flags) through an
# editable install; rebuilt when a kernel source or the environment changes.
$(OP_LIBRARY): $(OP_SOURCES) $(PINS_STAMP)
	$(PYTHON) -m pip install -q --no-build-isolation --no-deps -e .
	@touch $@

build: venv $(OP_LIBRARY)

# The main job: 2-worker training of the extreme-classification head, uncompressed
# and with each compressor, on localhost and then on an emulated cluster with
# 1 Gbit/s links (root; DEMO_FLAGS=--noslow_link skips it).
demo: build
	$(PYTHON) -m benchmarks.main_job $(DEMO_FLAGS)

pytest: build
	$(PYTHON) -m pytest -q tests

# All tests: the Python suite, then the C++ op tests built with Bazel.
test: pytest bazel-test

bazel-test: venv
	tools/bazel_test.sh

# The C++ op and core tests again, with the op library and the tests built
# with AddressSanitizer and UndefinedBehaviorSanitizer (build/sanitize/).
sanitize: venv
	tools/sanitize.sh

# Compile-and-link check of the CUDA kernels (CI builds one architecture).
cuda-check: venv
	tools/cuda_check.sh

# The GPU build of the op library, installed in place of the CPU one.
build-gpu: build
	TFCOMP_CUDA_ARCHS="$(CUDA_ARCHS)" tools/build_gpu_library.sh
	cp build/gpu/_tfcomp_ops.so $(OP_LIBRARY)

bench: build
	$(PYTHON) -m benchmarks.ops_bench
	$(PYTHON) -m benchmarks.sparse_bench

clean:
	rm -rf build $(OP_LIBRARY) tfcomp.egg-info
