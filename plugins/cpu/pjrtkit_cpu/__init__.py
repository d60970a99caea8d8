"""pjrtkit's CPU backend: NumPy kernels behind the PJRT C API, JAX platform ``pjrtkit_cpu``."""
__version__ = "0.1.0"
