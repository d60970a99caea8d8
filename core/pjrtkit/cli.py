"""The ``pjrtkit`` command.

    pjrtkit list                    installed backends, versions, status, why a broken one failed
                                    (and the installed jax, and whether it is a tested release)
    pjrtkit info BACKEND            platform, devices, memory spaces and declared capabilities
    pjrtkit topology BACKEND NAME   a compile-only topology (AOT) by name
    pjrtkit build-library BACKEND [--output DIR]   DIR/libpjrtkit_<backend>.so, a PJRT plugin
                                    library (GetPjrtApi) that any PJRT host loads
    pjrtkit conformance BACKEND     the conformance suite on a backend (exit 1 only on FAIL)
        [--json PATH] [--markdown PATH] [--layer abi,hooks,jax] [--check ID ...]
    pjrtkit conformance --library PATH   layer 1 (the C ABI) on any PJRT plugin .so
    pjrtkit coverage BACKEND [--output PATH] [--from-json PATH]   the op x dtype table of the
        JAX surface the backend covers (docs/coverage.md), from the conformance suite's layer 3

conformance and coverage need the extra ``pip install 'pjrtkit[conformance]'``. Other installed
distributions add sub-commands through the entry-point group ``pjrtkit.commands`` (a module with
HELP, DESCRIPTION, add_arguments(parser) and main(args)); pjrtkit's development tools
(``pjrtkit-tools``, extra ``pjrtkit[dev]``) add:
    pjrtkit jax-tests [--files F,..] [-k EXPR] [--x64] [--json PATH]   JAX's own test files on
        a backend and on XLA's CPU backend; --expected-passes FILE for the CI check
"""
from __future__ import annotations

import argparse
import json
import logging
import sys

log = logging.getLogger(__name__)

COMMAND_ENTRY_POINT_GROUP = "pjrtkit.commands"


def _cmd_list(args) -> int:
    from pjrtkit import discovery

    statuses = discovery.discover()
    if args.json:
        print(json.dumps([{"name": s.name, "platform": f"pjrtkit_{s.name}",
                           "distribution": s.distribution, "version": s.version,
                           "status": s.status, "reason": s.reason} for s in statuses], indent=2))
        return 0
    print(_jax_line())
    if not statuses:
        print("no pjrtkit backends installed (install one, e.g. pjrtkit-cpu)")
        return 0
    print(f"{'backend':<10} {'JAX platform':<16} {'distribution':<16} {'version':<10} status")
    for s in statuses:
        platform = "pjrtkit_" + s.name
        line = f"{s.name:<10} {platform:<16} {s.distribution:<16} {s.version:<10} {s.status}"
        if s.reason:
            line += f" ({s.reason})"
        print(line)
    return 0


def _jax_line() -> str:
    """The installed jax/jaxlib and whether pjrtkit is tested with that release line."""
    from pjrtkit import jax_compat

    versions = jax_compat.installed_versions()
    problem = jax_compat.support_problem()
    return (f"jax {versions['jax']}, jaxlib {versions['jaxlib']}: "
            + (f"warning: {problem}" if problem else "a tested release line"))


def _describe(topology) -> list[str]:
    lines = []
    for d in topology.devices:
        kinds = ", ".join(f"{m.kind}{'*' if m.kind == d.default_memory_kind else ''}"
                          for m in d.memory_spaces)
        lines.append(f"  device {d.id}: kind={d.kind} process={d.process_index} "
                     f"local_hardware_id={d.local_hardware_id} coords={tuple(d.coords)} "
                     f"memories=[{kinds}]")
    return lines


def _cmd_info(args) -> int:
    from pjrtkit import discovery

    backend = discovery.load_backend(args.backend)
    topology = backend.client_topology(options={})
    print(f"backend {backend.name}: JAX platform {backend.platform_name}, "
          f"{backend.platform.version}, {len(topology.devices)} device(s) "
          f"(* = default memory)")
    print("\n".join(_describe(topology)))
    print("\n".join(_describe_capabilities(backend.capabilities())))
    return 0


def _describe_capabilities(caps) -> list[str]:
    """What the backend declares through pjrtkit_capabilities ("not declared" for None)."""
    def listed(values, limit=12):
        if values is None:
            return "not declared"
        names = sorted(values)
        more = f", ... ({len(names)} in all)" if len(names) > limit else ""
        return (", ".join(names[:limit]) or "none") + more

    return ["  declared capabilities:",
            f"    dtypes: {listed(caps.dtypes, limit=20)}",
            f"    ops: {listed(caps.ops)}",
            f"    custom-call targets: {listed(caps.custom_call_targets)}",
            f"    features: {listed(caps.features)}"]


def _cmd_topology(args) -> int:
    from pjrtkit import discovery

    backend = discovery.load_backend(args.backend)
    topology = backend.make_topology(name=args.name, options={})
    print(f"compile-only topology {topology.name!r} of {backend.platform_name}: "
          f"{len(topology.devices)} device(s)")
    print("\n".join(_describe(topology)))
    return 0


def _cmd_build_library(args) -> int:
    from pjrtkit.abi.library import build_library

    path = build_library(args.backend, args.output)
    print(f"{path}: PJRT plugin library of pjrtkit_{args.backend} (GetPjrtApi); it starts "
          f"{sys.executable} (Python {sys.version_info.major}.{sys.version_info.minor}) in a host "
          f"without Python, or uses the host's Python of that version")
    return 0


def _conformance_extra_missing(command: str) -> bool:
    """Says how to install the conformance extra when it is missing (then True)."""
    from pjrtkit.conformance import INSTALL_HINT, missing_requirements

    missing = missing_requirements()
    if missing:
        print(f"pjrtkit {command}: the conformance suite needs the extra that brings "
              f"{', '.join(missing)}: {INSTALL_HINT}", file=sys.stderr)
    return bool(missing)


def _cmd_conformance(args) -> int:
    if _conformance_extra_missing("conformance"):
        return 2
    from pjrtkit.conformance.runner import SelectionError, Target, run_and_report

    if (args.backend is None) == (args.library is None):
        print("pjrtkit conformance: name a BACKEND or give --library PATH (not both)",
              file=sys.stderr)
        return 2
    target = (Target.of_library(args.library) if args.library
              else Target.backend_named(args.backend))
    try:
        return run_and_report(target, args)
    except SelectionError as exc:
        print(f"pjrtkit conformance: {exc}", file=sys.stderr)
        return 2


def _cmd_coverage(args) -> int:
    if _conformance_extra_missing("coverage"):
        return 2
    from pjrtkit.conformance.coverage_table import main as write_coverage

    return write_coverage(args)


def _add_installed_commands(sub) -> None:
    """Sub-commands other distributions add (entry-point group ``pjrtkit.commands``). One that
    fails to load is logged and left out: it never breaks the core commands."""
    from stevedore import ExtensionManager

    def failed(_manager, entry_point, exc):
        log.warning("pjrtkit: command %r from %s is left out: %s: %s", entry_point.name,
                    entry_point.value, type(exc).__name__, exc)

    commands = ExtensionManager(COMMAND_ENTRY_POINT_GROUP, invoke_on_load=False,
                                on_load_failure_callback=failed)
    for extension in sorted(commands, key=lambda e: e.name):
        module = extension.plugin
        p = sub.add_parser(extension.name, help=getattr(module, "HELP", None),
                           description=getattr(module, "DESCRIPTION", None))
        module.add_arguments(p)
        p.set_defaults(run=module.main)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="pjrtkit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="installed backends and their status")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=_cmd_list)
    p = sub.add_parser("info", help="devices and memories of a backend")
    p.add_argument("backend")
    p.set_defaults(run=_cmd_info)
    p = sub.add_parser("topology", help="a compile-only topology by name")
    p.add_argument("backend")
    p.add_argument("name", nargs="?", default="")
    p.set_defaults(run=_cmd_topology)
    p = sub.add_parser("conformance", help="run the conformance suite and write reports",
                       description="Run the conformance suite against a backend (all layers) "
                                   "or a PJRT plugin library (layer 1). Exit status 1 only "
                                   "when a check FAILs.")
    p.add_argument("backend", nargs="?", help="installed pjrtkit backend name (e.g. cpu)")
    p.add_argument("--library", metavar="PATH", help="a PJRT plugin shared library (layer 1)")
    from pjrtkit.conformance.runner import add_arguments
    add_arguments(p)
    p.set_defaults(run=_cmd_conformance)
    p = sub.add_parser("coverage", help="the op x dtype table of the JAX surface a backend "
                                        "covers (markdown)",
                       description="Run the conformance suite's layer 3 on a backend (or read "
                                   "a report it wrote) and print the op x dtype table: "
                                   "pjrtkit coverage cpu --output docs/coverage.md")
    from pjrtkit.conformance.coverage_table import add_arguments as add_coverage_arguments
    add_coverage_arguments(p)
    p.set_defaults(run=_cmd_coverage)
    p = sub.add_parser("build-library", help="the backend as a PJRT plugin shared library "
                                             "(GetPjrtApi) for any PJRT host",
                       description="Write DIR/libpjrtkit_<backend>.so: a PJRT plugin any PJRT "
                                   "host loads with dlopen and GetPjrtApi. It is tied to this "
                                   "Python and its environment (where the backend is "
                                   "installed).")
    p.add_argument("backend")
    p.add_argument("--output", "-o", metavar="DIR", default=".",
                   help="folder to write the library to (default: the current one)")
    p.set_defaults(run=_cmd_build_library)
    _add_installed_commands(sub)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except Exception as exc:  # noqa: BLE001 - the CLI reports, no tracebacks dumped on users
        print(f"pjrtkit: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
