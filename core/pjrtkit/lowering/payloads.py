"""What the plan builder needs to know about a backend's payloads, without knowing what they are.

A payload is whatever a backend's kernels take and return: a NumPy array on the cpu backend, a
device pointer on a GPU, any object on a test backend. The plan builder never looks inside one.
It materialises constants once and folds constant subexpressions at build time, and for that it
asks the backend's ``Payloads`` (``LoweringRegistry.payloads``) three questions:

- ``make_constant(value, type)``: the payload of a ``stablehlo.constant``;
- ``fold(kernel, inputs)``: run a kernel on constant payloads now, or decline (None);
- ``describe(payload)``: its ``(shape, dtype)``, for ``PJRTKIT_CHECK_KERNELS``.

This module, like the rest of ``pjrtkit.lowering``, imports no NumPy: the NumPy answers are
``pjrtkit.reference.payloads.NumpyPayloads``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pjrtkit.stablehlo.ir import TensorType


class Payloads:
    """The plan builder's questions about one backend's payloads; a backend subclasses it.

    The defaults suit any backend except for constants, which only the backend can hold:
    folding runs the backend's own kernel on its own payloads and keeps the results, and
    kernel results are not checked (``describe`` cannot tell).
    """

    def make_constant(self, value: Any, type: "TensorType") -> Any:
        """The payload of a ``stablehlo.constant`` whose result has ``type``.

        ``value`` is the op's ``value`` attribute as the IR decodes it: a host array (NumPy,
        with ml_dtypes for bf16 and narrower floats) of ``type``'s shape, or of shape ``()``
        for a splat that fills the whole shape. Called once per constant at build time; the
        payload is then handed to every execution, so kernels must never write it.

        Raises:
            NotImplementedError: the default; the plan builder reports it as UNIMPLEMENTED
                naming the backend and the op (a backend without constants cannot run a
                program that has one).
        """
        raise NotImplementedError("the backend's Payloads has no make_constant, so it "
                                  "cannot hold constants")

    def fold(self, kernel: Callable[..., tuple], inputs: Sequence[Any]) -> tuple | None:
        """Run ``kernel`` once at build time on the constant payloads ``inputs``: the tuple of
        result payloads, kept for every execution (and never written), or None to run the
        kernel at execution time instead (a result too big to keep, or a backend that never
        folds). The default runs it: the same kernel on the same inputs gives the same result.
        """
        return tuple(kernel(*inputs))

    def describe(self, payload: Any) -> tuple[tuple[int, ...], Any] | None:
        """``(shape, dtype)`` of a payload, dtype as ``TensorType.dtype`` spells it, so that
        ``PJRTKIT_CHECK_KERNELS`` can compare every kernel result with the program's declared
        type; None when the backend cannot tell (then results are not checked)."""
        return None
