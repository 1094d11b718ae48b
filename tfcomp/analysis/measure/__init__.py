"""What the model is fed, measured: codec times and payloads (with TensorFlow), the
link as the engine's collectives see it, and model profiles from Timeline traces."""
