"""The rocm backend's hooks (entry point ``pjrtkit.backends: rocm``): pjrtkit-gpu's
``GpuBackend`` on the hip driver. Importing this module imports no driver and no Triton;
the first hook that needs the driver starts it."""
from __future__ import annotations

from pjrtkit_gpu.backend import GpuBackend

from pjrtkit_rocm import __version__

HOOKS = GpuBackend(vendor="hip", plugin="rocm", like=None, version=__version__)
