"""Helpers for a plugin's own tests, shipped with pjrtkit (no pytest needed): ``programs``
(lower a JAX function to the core's IR and plan it with a rule set), ``tolerances`` (the one
per-dtype tolerance table, ``assert_close``) and ``ulps`` (errors in units in the last place).

The conformance suite is ``pjrtkit.conformance`` (extra ``pjrtkit[conformance]``); pjrtkit's
own development tools are the separate distribution ``pjrtkit-tools`` (extra ``pjrtkit[dev]``).
"""
