"""Collectives across the devices of one launch, for plugins whose payloads live in host memory.

A program partitioned over N devices runs as N threads, one per device (``runtime.executable``
starts them); each thread knows which device it is (``launch.current_device()``). A collective
kernel (``pjrtkit.reference.collectives`` holds the NumPy rules) works out which devices take
part (``groups``, StableHLO's process groups), then hands its payload to the launch's
rendezvous (``Launch.exchange``) and gets every participant's payload back in group order.

The seam for a plugin with its own collectives (a GPU's NCCL, say): collectives are ordinary
lowering rules keyed by op name, so a plugin registers its own ``stablehlo.all_reduce`` (and
friends) in its ``LoweringRegistry``; ``current_device()`` and ``groups.process_group`` serve
it as they serve the reference rules, and ``Launch.exchange`` moves any payload object.
"""
