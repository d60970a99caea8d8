"""pjrtkit's AMD GPU backend (platform ``pjrtkit_rocm``): the shared Triton lowering of
pjrtkit-gpu on the hip driver (``pjrtkit_gpu.drivers.hip``), or emulated with
``PJRTKIT_GPU_EMULATE=1``."""

__version__ = "0.1.0"
