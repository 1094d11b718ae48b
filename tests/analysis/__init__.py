"""tfcomp.analysis (and tfcomp.costs): the cost model, the simulator, the planner and the command line."""
