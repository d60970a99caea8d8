"""Test support shipped with pjrtkit: program lowering helpers, tolerances, conformance suite."""
