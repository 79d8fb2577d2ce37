import os

# Tests run on the CPU unless the caller chose a platform; never grab all accelerator memory.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
