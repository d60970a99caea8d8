"""Host callbacks (jax.pure_callback, io_callback, jax.debug.*): the core's rule, as it is.

Payloads of this backend are NumPy arrays in host memory, so the core's kernel for the
``pjrtkit_host_callback`` custom call needs no copies (``pjrtkit.callbacks``).
"""
from pjrtkit.callbacks import HOST_CALLBACK_TARGET, host_callback_rule
from pjrtkit.lowering.registry import custom_call_rule

from pjrtkit_cpu.lowering.registry import RULES

RULES.register(custom_call_rule(HOST_CALLBACK_TARGET))(host_callback_rule)
