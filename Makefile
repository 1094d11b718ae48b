# tfcomp's entry points. Every target creates the pinned environment first
# (reused while the pins are unchanged) and builds what it needs.
#
# STACK=pinned: TensorFlow 2.15.1 with Keras 2 and Horovod, in .venv,
# everything. STACK=current: TensorFlow 2.21 with Keras 3 and tf-keras, in
# .venv-current, its own op library (tfcomp/_tfcomp_ops.tf<version>.so), the
# part of the suite that stack carries. Without STACK, targets use the pinned
# stack, and `make test` tests both.
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
# a time (a file's module fixtures are set up once); 1 runs it in one.
PYTEST_WORKERS ?= 2
XDIST := $(if $(filter 1,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile)
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
# The part of the suite the current stack carries. With tf.keras as tf-keras:
# the ops, the compressors on the in-process emulator, plans, the main job
# (and, in a subprocess, under Keras 3, with its predicted column and
# tfcomp.Auto). Then 2-worker runs of the tf.distribute engine under Keras 3:
# the bare names of a sparsifier and a low-rank compressor (DRAGONN, PowerSGD:
# their dense epoch learned from model.fit's dataset) under SGD with momentum
# against dense (EFSignSGD runs through model.fit in the tutorial test),
# FrozenVarianceAdam, a custom loop, dense against tf.distribute's own,
# resuming every worker's residuals from BackupAndRestore with one backup_dir
# and from a .keras archive, TensorFlow's multi-worker Keras tutorials (model.fit
# with a worker killed and both resumed, and the custom loop) and
# gradient_accumulation_steps; under tf-keras the part of them below.
CURRENT_STACK_TESTS := tests/keras/test_stacks.py tests/ops tests/compressors/test_compressors.py \
	tests/compressors/test_sparse.py tests/compressors/test_lowrank.py tests/compressors/test_sign_zeros.py \
	tests/compressors/test_momentum.py tests/benchmarks/test_convergence_advice.py tests/plan/test_plan.py \
	tests/benchmarks/test_main_job.py tests/keras/test_frozen_adam.py tests/engines/test_keras3_backup.py
# Under Keras 3 (tf-keras runs them as the pinned stack's Keras 2 does): FrozenVarianceAdam's
# unit tests; the Timeline in one process (model.fit, eager and compiled, and a custom loop) and
# on 2 workers (model.fit, serialised and recorded as it runs); tfcomp.Auto's unit tests and its
# 2-worker run kept and resumed on a slow link (the pinned stack runs its other runs: the same
# callback); mixed precision with overflows forced on one worker (EFSignSGD: the exchanged
# gradients decide, no state moves) and mixed_bfloat16.
CURRENT_STACK_KERAS3 := tests/keras/test_frozen_adam.py tests/callbacks/test_timeline.py tests/auto/test_auto.py \
	tests/engines/test_mixed_precision.py
CURRENT_STACK_KERAS3_SELECTED := not (test_auto_ and (falls_back or plans_again or audits)) and \
	not (test_every_compressor_marks or test_recorded_as_it_runs and one-bucket or \
	test_custom_loop_on_two_workers) and not (keras3_overflow and not EFSignSGD)
CURRENT_STACK_DISTRIBUTE := (bare_name and (DRAGONN or PowerSGD)) or custom_training_loop or frozen_variance_adam or \
	backup_and_restore_resumes_with_every_workers_residuals or no_compression_matches_tf_distribute or \
	keras3_model_save or tutorial or gradient_accumulation
# tf-keras takes Keras 2's path, which the pinned stack runs in full: there, what TensorFlow
# 2.21 could change (a bare name, resuming from BackupAndRestore, dense against tf.distribute's
# own, the tutorials).
CURRENT_STACK_DISTRIBUTE_TF_KERAS := (bare_name and DRAGONN) or backup_and_restore_resumes_with_every_workers_residuals \
	or no_compression_matches_tf_distribute or tutorial
pytest: build
	TF_USE_LEGACY_KERAS=1 $(PYTHON) -m pytest -q -rs $(XDIST) $(CURRENT_STACK_TESTS)
	TF_USE_LEGACY_KERAS=1 $(PYTHON) -m pytest -q -rs tests/engines/test_distribute.py tests/engines/test_keras_tutorial.py -k "$(CURRENT_STACK_DISTRIBUTE_TF_KERAS)"
	env -u TF_USE_LEGACY_KERAS $(PYTHON) -m pytest -q -rs tests/engines/test_distribute.py tests/engines/test_keras_tutorial.py -k "$(CURRENT_STACK_DISTRIBUTE)"
	env -u TF_USE_LEGACY_KERAS $(PYTHON) -m pytest -q -rs $(CURRENT_STACK_KERAS3) -k "$(CURRENT_STACK_KERAS3_SELECTED)"

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
