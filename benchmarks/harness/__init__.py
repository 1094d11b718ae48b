"""What several of tfcomp's benchmarks share (each experiment has a folder of its own
beside this one, run as `python -m benchmarks.EXPERIMENT`):

- timing: medians of repeated calls (StepTimes, each step's host time, is in tests/cluster);
- record: the machine, the command that reproduces a run, NAME.json and NAME.md;
- compression_specs: the compressor specs the benchmarks pass around ('PowerSGD:rank=4',
  'auto', 'plan:PATH'), read by tfcomp.compressors.registry.parse_compressor;
- train_worker: the main job's worker (`python -m benchmarks.harness.train_worker`),
  whose flags and compiling the other training benchmarks' workers build on;
- convergence_tasks: the learnable tasks the convergence, lr_sweep and sign_zeros
  benchmarks train on the in-process emulator;
- prediction and profile_worker: a tfcomp.analysis profile recorded on a benchmark's
  workers, and a run's step time predicted from it;
- plots: the plot shapes several reports share.
"""
