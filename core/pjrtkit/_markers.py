"""The pluggy markers. ``hookimpl`` is public (re-exported by ``pjrtkit``); the spec marker is not."""
import pluggy

PROJECT = "pjrtkit"
hookimpl = pluggy.HookimplMarker(PROJECT)
_hookspec = pluggy.HookspecMarker(PROJECT)
