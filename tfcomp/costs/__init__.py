"""What communication costs: one network model (latency and bandwidth, the ring
allreduce and allgather formulas) for tensor selection, the simulator and the
planner. The standard library only: no TensorFlow, no numpy."""
