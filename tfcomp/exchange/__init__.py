"""The gradient exchange of one step (tfcomp's core, with the compressors and ops):
step (Exchange), fusion and buckets, efficiency-aware tensor selection, and the
hooks through which features built on it (tfcomp.Auto, the Timeline) attach."""
