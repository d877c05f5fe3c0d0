"""Moved to :mod:`avalanche_sdr.routers.lda_router`; this name is kept for one release.

Importing it warns (``DeprecationWarning``) and gives the moved module itself, so
every name (and module-level state) is the same object as there.
"""
import sys
import warnings

from avalanche_sdr.routers import lda_router as _moved

warnings.warn("avalanche_sdr.models.lda_router moved to avalanche_sdr.routers.lda_router; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved

__all__ = list(_moved.__all__)
