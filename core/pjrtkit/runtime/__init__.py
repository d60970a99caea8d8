"""Backend-independent objects behind the PJRT handles (contract: INTERFACE.md)."""
