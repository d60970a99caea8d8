"""The cpu backend's lowering rules: the reference rule set (``pjrtkit.reference``) with the cpu's
own rules on top. Importing this package registers every cpu rule in ``RULES``."""
import importlib
import pkgutil

from pjrtkit_cpu.lowering.registry import CPU_DTYPES, RULES

# Every sibling module registers its rules on import; a new module is picked up automatically.
for _module in pkgutil.iter_modules(__path__):
    if _module.name != "registry":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["RULES", "CPU_DTYPES"]
