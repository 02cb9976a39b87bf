"""The optional libraries some scorers use, imported in one place, each with a one-line install hint.

- math-verify: verl's `math_verify` scorer, and MATH's `use_math_verify=True`. No fallback: the
  scorer needs it, so its absence is an ImportError naming `pip install 'hybridrl[math]'`.
- pylatexenc: prime_math / geometry3k turn LaTeX answers into plain text before the sympy comparison.
  Without it that step is skipped (as verl's graders skip it when it fails), so fewer LaTeX answers are
  recognised as equal; a warning says so once.
- sympy (prime_math / geometry3k's symbolic check) is imported directly: torch requires it, so it is
  always installed with hybridrl.
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType

log = logging.getLogger(__name__)

INSTALL_HINTS = {
    "math_verify": "pip install 'hybridrl[math]'  (or: pip install math-verify)",
    "pylatexenc": "pip install 'hybridrl[math]'  (or: pip install pylatexenc)",
}
_warned: set[str] = set()


def require(module: str, why: str) -> ModuleType:
    """Import `module` or raise ImportError with its install hint and what needs it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"{why} needs the {module} package, which is not installed: {INSTALL_HINTS[module]}") \
            from error


def optional(module: str, fallback: str) -> ModuleType | None:
    """`module`, or None after one warning naming what the fallback does and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        if module not in _warned:
            _warned.add(module)
            log.warning("%s is not installed, so %s. Install it: %s", module, fallback, INSTALL_HINTS[module])
        return None


def available(module: str) -> bool:
    return importlib.util.find_spec(module) is not None
