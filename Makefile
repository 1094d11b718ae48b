# tfcomp's entry points. Every target creates the pinned environment first
# (reused while the pins are unchanged) and builds what it needs.
#
# STACK=pinned: TensorFlow 2.15.1 with Keras 2 and Horovod, in .venv.
# STACK=current: TensorFlow 2.21 with Keras 3 and tf-keras, in .venv-current,
# its own op library (tfcomp/_tfcomp_ops.tf<version>.so). Without STACK, targets
# use the pinned stack, and `make test` tests both. Each test says which stacks
# it applies to (tests/stacks.py).
SHELL := /bin/bash
STACK ?=
ifeq ($(filter-out pinned,$(STACK)),)
VENV ?= .venv
OP_LIBRARY := tfcomp/_tfcomp_ops.so
else ifeq ($(STACK),current)
VENV ?= .venv-current
CURRENT_TF := $(shell sed -n 's/^tensorflow==//p' requirements/current/base.txt)
OP_LIBRARY := tfcomp/_tfcomp_ops.tf$(CURRENT_TF).so
export TFCOMP_OPS_VERSIONED_NAME := 1
else
$(error STACK must be pinned or current, not '$(STACK)')
endif
PYTHON := $(VENV)/bin/python
PINS_STAMP := $(VENV)/.tfcomp-pins
OP_SOURCES := $(shell find custom_ops -name '*.cc' -o -name '*.h') setup.py
CUDA_ARCHS ?= 70 75 80 86 89 90
export TF_CPP_MIN_LOG_LEVEL ?= 3
export PYTHON

.PHONY: venv constraints build demo test pytest layering netfaults bazel-test sanitize cuda-check build-gpu bench clean

venv:
	@tools/bootstrap_venv.sh --stack $(or $(STACK),pinned) $(VENV)

$(PINS_STAMP): venv

# Re-resolves the stack's base.txt (and horovod.txt) and rewrites its constraints.txt.
constraints:
	tools/bootstrap_venv.sh --resolve --stack $(or $(STACK),pinned) $(VENV)

# The op library, compiled by setup.py (g++ with tf.sysconfig flags) through an
# editable install; rebuilt when a kernel source or the environment changes.
$(OP_LIBRARY): $(OP_SOURCES) $(PINS_STAMP)
	$(PYTHON) -m pip install -q --no-build-isolation --no-deps -e .
	@touch $@

build: venv $(OP_LIBRARY)

# The main job: 2-worker training of the extreme-classification head, uncompressed
# and with each compressor, on localhost and then on an emulated cluster with
# 1 Gbit/s links (root; DEMO_FLAGS=--noslow_link skips it). STACK=current runs it
# on TensorFlow 2.21 with Keras 3 (with tf-keras where TF_USE_LEGACY_KERAS=1 is set).
demo: build
	$(PYTHON) -m benchmarks.main_job $(DEMO_FLAGS)

# The suite runs in PYTEST_WORKERS pytest-xdist processes, a test file each at
# a time (a file's module fixtures are set up once), the longest files first
# (tests/conftest.py); 1 runs it in one.
PYTEST_WORKERS ?= 2
XDIST := $(if $(filter 1,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder)
ifneq ($(STACK),current)
pytest: build layering netfaults
	$(PYTHON) -m pytest -q --durations=25 $(XDIST) tests

# All tests: the Python suite, then the C++ op tests built with Bazel; without
# STACK, then the current stack's part too.
ifeq ($(STACK),)
test:
	tools/test_both_stacks.sh
else
test: pytest bazel-test
endif
else
# The current stack runs the suite twice: with tf.keras as tf-keras (TF_USE_LEGACY_KERAS=1),
# then as Keras 3. Each test's stacks marker (tests/stacks.py) says which of the three stacks
# it applies to; the others skip it, saying why (`pytest -rs`, and a count per reason at the end).
pytest: build
	TF_USE_LEGACY_KERAS=1 $(PYTHON) -m pytest -q $(XDIST) tests
	env -u TF_USE_LEGACY_KERAS $(PYTHON) -m pytest -q --durations=15 $(XDIST) tests

test: pytest
endif

# nftables for the fault tests' packet loss (tests/cluster/test_faults.py), as root.
netfaults:
	tools/setup_netfaults.sh

# The layering contracts of pyproject.toml (import-linter); tests/test_layering.py
# checks that tfcomp has no import cycle.
layering: venv
	$(VENV)/bin/lint-imports

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

# The op benchmarks (benchmarks/ops/: sign, sparse, dgc_candidates), each with its defaults.
bench: build
	$(PYTHON) -m benchmarks.ops

clean:
	rm -rf build $(OP_LIBRARY) tfcomp.egg-info
