"""Many processes (``jax.distributed``): placement (node id and count from the client's
create options), the PJRT key-value store, the topology exchange, the per-client runtime and
one interface to the collective engines (gloo, MPI, NCCL/RCCL) plugins pick from. See
ARCHITECTURE.md, "Many processes"."""
