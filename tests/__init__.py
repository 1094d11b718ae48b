"""tfcomp's tests, a folder per package of tfcomp (ops, compressors, exchange, plan,
state, keras, engines, auto, callbacks, analysis, testing) and of the repository
(models, cluster: the launchers; benchmarks: the benchmark scripts' own tests, the only
tests that import benchmarks/; docs). workers/ holds the modules the multi-process tests
launch (`python -m tests.workers.NAME`) and their shared workload; data/ their files.
Every folder is a package, so that test files of the same name in two folders do not
clash."""
