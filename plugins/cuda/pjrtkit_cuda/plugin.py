"""The cuda backend's hooks (entry point ``pjrtkit.backends: cuda``): pjrtkit-gpu's
``GpuBackend`` on the cuda driver. Importing this module imports no driver and no Triton;
the first hook that needs the driver starts it."""
from __future__ import annotations

from pjrtkit_gpu.backend import GpuBackend

from pjrtkit_cuda import __version__

HOOKS = GpuBackend(vendor="cuda", plugin="cuda", like=None, version=__version__)
