"""The project name pluggy knows the hooks by, and the public ``hookimpl`` marker (re-exported
by ``pjrtkit``). The spec marker lives in ``pjrtkit.hookspecs``, private to the contract."""
import pluggy

PROJECT = "pjrtkit"
hookimpl = pluggy.HookimplMarker(PROJECT)
