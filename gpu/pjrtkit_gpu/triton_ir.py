"""Kernels that arrive as Triton IR (Pallas's ``pl.pallas_call`` on a GPU platform), compiled
ahead of time with Triton for one target and launched like the lowering's own kernels.

With jaxlib 0.10.2 and 0.12, Pallas's Triton lowering emits ``stablehlo.custom_call
@__gpu$xla.gpu.triton`` whose ``mhlo.backend_config`` holds the kernel's Triton module as MLIR
bytecode (``ir``, written by jaxlib's MLIR with its bundled ``tt`` dialect; not compressed),
its ``name``, ``num_warps``, ``num_stages`` and grid (``grid_x``/``grid_y``/``grid_z``). Its
parameters are the operands' then the results' base pointers, in order. (jaxlib 0.11 emits
``triton_kernel_call_ffi`` instead, a zlib-compressed proto of a kernel jaxlib already
compiled; not handled here.)

Triton's ``compile`` reads IR as text (``.ttir``), so the bytecode is printed as text by
jaxlib's MLIR (the dialect it was written with) first, in the isolated parser child; Triton 3.6
and 3.9 parse what jaxlib 0.10.2 prints, Triton 3.9 what jaxlib 0.12 prints. The bytecode was
made for one vendor: Pallas lowers math functions to libdevice calls for ``cuda`` and to ocml
for ``rocm``, so a kernel lowered for one does not compile for the other's targets.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os

from pjrtkit_gpu import codegen
from pjrtkit_gpu.targets import TARGETS

# the custom call Pallas's Triton lowering emits (jax 0.10.2 and 0.12)
PALLAS_TRITON_TARGET = "__gpu$xla.gpu.triton"


@dataclasses.dataclass(frozen=True)
class TritonIrKernel:
    """One kernel as Triton IR text, with what launching it needs."""

    name: str
    ir_text: str
    num_warps: int
    num_stages: int
    grid: tuple[int, int, int]

    @property
    def key(self) -> str:
        text = f"{self.num_warps}/{self.num_stages}/{self.ir_text}"
        return hashlib.sha256(text.encode()).hexdigest()[:24]


def ir_text_from_bytecode(bytecode: bytes) -> str:
    """The Triton module ``bytecode`` (jaxlib's MLIR bytecode) as MLIR text, parsed in the
    isolated parser process (a user's bytes reach MLIR's bytecode reader); INVALID_ARGUMENT
    if it does not parse."""
    from pjrtkit.stablehlo.isolation import bytecode_text_isolated

    return bytecode_text_isolated(bytecode, "jaxlib.triton.dialect")


def kernel_from_backend_config(config: dict) -> TritonIrKernel:
    """The kernel of a ``__gpu$xla.gpu.triton`` custom call's decoded ``mhlo.backend_config``.

    Raises:
        KeyError / ValueError: the config lacks a field.
        InvalidArgument: its ``ir`` is bytecode that does not parse.
    """
    ir_bytes = config["ir"]
    if isinstance(ir_bytes, str):  # a UTF-8 text module: already what Triton reads
        text = ir_bytes
    else:
        text = ir_text_from_bytecode(ir_bytes)
    return TritonIrKernel(name=str(config["name"]), ir_text=text,
                          num_warps=int(config["num_warps"]),
                          num_stages=int(config["num_stages"]),
                          grid=(int(config["grid_x"]), int(config["grid_y"]),
                                int(config["grid_z"])))


def compile_triton_ir(kernel: TritonIrKernel, target: str):
    """Triton's compiled kernel (``.asm["cubin"]`` / ``["hsaco"]``, ``.metadata``) of
    ``kernel`` for ``target`` (``"sm_90"``, ``"gfx942"``, ...). No device needed."""
    import triton
    from triton.backends.compiler import GPUTarget

    backend, arch, warp = TARGETS[target]
    directory = codegen.kernel_directory()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{kernel.name}_{kernel.key}.ttir"  # Triton reads IR from a file
    if not path.exists():
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(kernel.ir_text)
        os.replace(temporary, path)
    return triton.compile(str(path), target=GPUTarget(backend, arch, warp),
                          options={"num_warps": kernel.num_warps,
                                   "num_stages": kernel.num_stages})
