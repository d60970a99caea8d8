"""The device tag a backend is tested as.

JAX's test_util picks the tests, the dtypes and the tolerances by ``jtu.device_under_test()``,
which is the flag ``jax_test_dut`` or else the platform name. A pjrtkit backend's platform name
(``pjrtkit_cpu``) is none of the tags JAX knows, so the runner must say what the backend is: the
cpu plugin is a CPU and is tested as one; a virtual TPU backend would be tested as ``tpu``.

No hook declares this today, so it comes from this table, keyed by the pjrtkit backend name (the
``pjrtkit.backends`` entry point), and ``--device-tag`` overrides it.
"""
from __future__ import annotations

DEVICE_TAGS: dict[str, str] = {
    "cpu": "cpu",
    "tpu": "tpu",
    "cuda": "gpu",
    "rocm": "gpu",
}

KNOWN_TAGS = frozenset({"cpu", "gpu", "tpu"})


class UnknownDeviceTag(ValueError):
    """The backend is not in the table and no tag was given."""


def device_tag_for(backend: str, override: str | None = None) -> str:
    """The ``jax_test_dut`` value for ``backend``: ``override`` if given, else the table's."""
    if override:
        if override not in KNOWN_TAGS:
            raise UnknownDeviceTag(f"device tag {override!r} is not one JAX's tests know "
                                   f"({', '.join(sorted(KNOWN_TAGS))})")
        return override
    try:
        return DEVICE_TAGS[backend]
    except KeyError:
        raise UnknownDeviceTag(
            f"no device tag known for backend {backend!r}; pass --device-tag "
            f"({', '.join(sorted(KNOWN_TAGS))}) to say which device it is tested as") from None
