"""The GPU device check: pjrtkit_cuda on a real GPU, in one command that fits the GPU test
machine's budget (``make gpu-device-check GPU_EMULATE=0``), or the same stages emulated here as
the baseline it is compared with (``make gpu-device-check``, ``GPU_EMULATE=1``).

Stages, each writing its results under the output folder as it finishes (``__main__``):
``device`` (GPU only: the machine, and the carried kernels compiled into Triton's cache with
the machine's own Triton), ``conformance`` (``pjrtkit conformance cuda`` in parallel shards),
``training`` (the examples' MLP, CNN and transformer steps against XLA's cuda, or cpu when
emulated), ``bench`` (``python -m benchmarks --suite gpu`` against the same reference, with
autotuning on a GPU), ``pallas`` (a Pallas Triton kernel on pjrtkit_cuda against XLA),
``vendor`` (the cuBLAS path, ``PJRTKIT_GPU_VENDOR_LIBRARIES=require``: a probe, the
conformance checks holding dots against the Triton path's outcomes and, on a GPU, the matmul
benchmarks against XLA).
``carry`` prepares what travels to the machine (wheels, the kernel records, Triton's cache) and
prints the device tool's command line.
"""
