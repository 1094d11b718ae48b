"""tfcomp.ops: the custom ops against NumPy references, and the op library's loading."""
