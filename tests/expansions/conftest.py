"""The expansion tests import their helpers (``expansion_support``) by name."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
