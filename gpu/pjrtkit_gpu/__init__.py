"""pjrtkit's shared GPU lowering (distribution ``pjrtkit-gpu``): StableHLO programs -> Triton
kernels written once, launched through a thin driver per vendor (``drivers.cuda``,
``drivers.hip``) or through Triton's interpreter on host memory (``drivers.emulated``,
``PJRTKIT_GPU_EMULATE=1``). Not a backend: pjrtkit-cuda and pjrtkit-rocm are."""

__version__ = "0.1.0"
