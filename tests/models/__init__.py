"""models/: the reference models."""
