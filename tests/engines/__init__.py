"""The engines (tfcomp.engines, tfcomp.distribute, tfcomp.horovod) with real worker processes."""
