"""tfcomp.compressors: each compressor on the in-process K-worker emulator."""
