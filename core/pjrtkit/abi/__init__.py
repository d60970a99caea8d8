"""Everything C: pjrtkit's own PJRT declarations, the PJRT_Api tables, Args marshalling, handles.

Nothing outside this package touches cffi. ``pjrtkit.abi.api.register_backend`` is the entry
point; importing this package itself does not load the compiled module.
"""
