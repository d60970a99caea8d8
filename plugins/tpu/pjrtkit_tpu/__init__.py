"""pjrtkit's virtual TPU backend, JAX platform ``pjrtkit_tpu``: libtpu's topologies (device
kinds, coords, cores, slices, hosts), HBM sizes and TPU numerics, computed by the cpu plugin's
kernels (imported from ``pjrtkit_cpu``, never copied)."""
__version__ = "0.1.0"
