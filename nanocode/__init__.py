"""nanocode: a small coding model trained end to end in pure JAX, run as a terminal coding agent."""

__version__ = "0.1.0"
