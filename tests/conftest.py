import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Compression profiles (tfcomp.selection) measured by the tests stay with the tests;
# worker processes inherit the variable.
os.environ.setdefault("TFCOMP_CACHE_DIR", tempfile.mkdtemp(prefix="tfcomp-test-cache-"))
