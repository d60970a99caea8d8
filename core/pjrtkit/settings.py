"""Reading the environment variables that hold a number of seconds (``PJRTKIT_*_TIMEOUT_S``)."""
from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def seconds_setting(variable: str, default: float) -> float:
    """The positive number of seconds ``variable`` holds; ``default`` when it is unset, and
    (with a warning naming it) when it is not a positive number."""
    value = os.environ.get(variable, "").strip()
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        log.warning("%s=%r is not a positive number of seconds; using %g", variable, value,
                    default)
        return default
    return seconds
