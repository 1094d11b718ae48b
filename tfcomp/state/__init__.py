"""Compressor state (residuals, factors, velocities) as checkpointed variables, the
record of which compressor made each tensor's state, and the hooks that carry both
through Keras 3's saving."""
