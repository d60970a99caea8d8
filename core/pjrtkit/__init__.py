"""pjrtkit: JAX accelerator backends written in Python, spoken to jaxlib through the PJRT C API."""
from pjrtkit._markers import hookimpl

__version__ = "0.1.0"
__all__ = ["hookimpl", "__version__"]
