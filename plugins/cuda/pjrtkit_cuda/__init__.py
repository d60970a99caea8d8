"""pjrtkit's NVIDIA GPU backend (platform ``pjrtkit_cuda``): the shared Triton lowering of
pjrtkit-gpu on the cuda driver (``pjrtkit_gpu.drivers.cuda``), or emulated with
``PJRTKIT_GPU_EMULATE=1``."""

__version__ = "0.1.0"
