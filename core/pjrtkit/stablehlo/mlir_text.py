"""MLIR bytecode of a dialect jaxlib bundles, printed as text: what the parser child does for
``isolation.bytecode_text_isolated`` (a user's bytes reach MLIR's bytecode reader here, so the
runtime calls it only in that child, unless ``PJRTKIT_ISOLATED_PARSER=0``)."""
from __future__ import annotations

import importlib

from pjrtkit.errors import InvalidArgument


def bytecode_text(bytecode: bytes, dialect_module: str) -> str:
    """``bytecode`` as MLIR text, ``dialect_module``'s dialect registered (a module with
    ``register_dialect(context)``, e.g. ``jaxlib.triton.dialect``); INVALID_ARGUMENT if it does
    not parse."""
    from jaxlib.mlir import ir

    dialect = importlib.import_module(dialect_module)
    context = ir.Context()
    dialect.register_dialect(context)
    with context:
        try:
            module = ir.Module.parse(bytecode)
        except Exception as exc:  # noqa: BLE001 - jaxlib's MLIRError and ValueError alike
            raise InvalidArgument(f"MLIR bytecode of {len(bytecode)} bytes ({dialect_module}) "
                                  f"does not parse: {type(exc).__name__}: {exc}"[:2000]) from None
        return module.operation.get_asm(enable_debug_info=False)


def with_module_attributes(code: bytes, attributes: dict[str, str]) -> bytes:
    """The program ``code`` (a portable artifact, or MLIR bytecode or text, that has been
    loaded before) with the module attributes ``attributes`` (name -> MLIR attribute text) set,
    as MLIR bytecode of the StableHLO dialect (a partitioned program holds ``mhlo`` ops no
    portable artifact can); what the parser child does for
    ``isolation.with_module_attributes_isolated``."""
    import io

    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    from pjrtkit import jax_compat

    code = bytes(code)
    context = jax_compat.make_ir_context()
    with context, ir.Location.unknown():
        if code[:4] == b"ML\xefR" and b"StableHLO_v" in code[4:48]:
            module = stablehlo.deserialize_portable_artifact(context, code)
        else:
            module = ir.Module.parse(code)
        for name, text in attributes.items():
            module.operation.attributes[name] = ir.Attribute.parse(text)
        out = io.BytesIO()
        module.operation.write_bytecode(out)
        return out.getvalue()
