"""Checking a backend's hook module against the contract (``pjrtkit.hookspecs``) when it loads.

pluggy registers a ``@hookimpl`` whose name matches no hook without complaint (only
``check_pending`` notices), ignores a ``pjrtkit_*`` function that lacks the marker, and reports
an argument the hook does not have with a message about its own internals. Each of these means
a hook the core will never call, so a backend with any of them is refused here, with an error
naming the backend, the function and the fix.
"""
from __future__ import annotations

import difflib
import inspect

import pluggy

from pjrtkit.errors import PluginContractError

# Hooks that left the contract, and what replaced them: a plugin written against an older core
# gets this instead of "not a hook".
RETIRED_HOOKS = {
    "pjrtkit_execute": "running a program is no longer a hook: return an object with "
                       "execute(arguments, devices) as CompiledProgram.executable from "
                       "pjrtkit_compile (see pjrtkit.types.PluginExecutable)",
}


def register_checked(manager: pluggy.PluginManager, plugin: object, plugin_name: str,
                     backend_name: str) -> None:
    """Register ``plugin`` with ``manager`` and check it, or raise PluginContractError."""
    where = f"pjrtkit backend {backend_name!r} ({_describe(plugin)})"
    problems = _undecorated_hooks(manager, plugin)
    try:
        manager.register(plugin, plugin_name)
    except pluggy.PluginValidationError as exc:
        problems.append(f"{exc}; a hook implementation takes a subset of the hook's arguments, "
                        f"by name")
    problems += _unknown_hooks(manager)
    if not problems:
        try:
            manager.check_pending()
        except pluggy.PluginValidationError as exc:  # anything the scan above did not name
            problems.append(str(exc))
    if problems:
        raise PluginContractError(f"{where} breaks the hook contract: " + "; ".join(problems))


def known_hooks(manager: pluggy.PluginManager) -> list[str]:
    return sorted(name for name, caller in vars(manager.hook).items()
                  if isinstance(caller, pluggy.HookCaller) and caller.has_spec())


def _unknown_hooks(manager: pluggy.PluginManager) -> list[str]:
    known = known_hooks(manager)
    problems = []
    for name, caller in sorted(vars(manager.hook).items()):
        if not isinstance(caller, pluggy.HookCaller) or caller.has_spec():
            continue
        if not any(not impl.optionalhook for impl in caller.get_hookimpls()):
            continue
        problems.append(f"{name} is not a pjrtkit hook ({_hint(name, known)})")
    return problems


def _undecorated_hooks(manager: pluggy.PluginManager, plugin: object) -> list[str]:
    """``pjrtkit_*`` functions of the plugin that pluggy would skip for lack of the marker."""
    problems = []
    for name, value in sorted(vars(plugin).items() if hasattr(plugin, "__dict__") else ()):
        if (name.startswith("pjrtkit_") and inspect.isfunction(value)
                and manager.parse_hookimpl_opts(plugin, name) is None):
            problems.append(f"{name} is not decorated with @pjrtkit.hookimpl, so it would never "
                            f"be called (decorate it, or rename it if it is not a hook)")
    return problems


def _hint(name: str, known: list[str]) -> str:
    if name in RETIRED_HOOKS:
        return RETIRED_HOOKS[name]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]}?"
    return f"the hooks are {', '.join(known)}"


def _describe(plugin: object) -> str:
    name = getattr(plugin, "__name__", None) or type(plugin).__name__
    path = getattr(plugin, "__file__", None)
    return f"module {name}" + (f" at {path}" if path else "")
