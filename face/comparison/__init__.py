"""Is version B better than version A? Systems compared with statistics: ``face compare`` and ``face.compare``.

    import face
    comp = face.compare("runs/v1", "runs/v2")   # face evaluate outputs, run files, MLflow run ids, face.Result
    comp.verdicts()                            # per aspect: difference, CI, p (Holm), better / worse / no detectable
    comp.report("comparison.html")             # comp.to_markdown(), comp.means, comp.differences, comp.ranking

Modules: ``runs`` (what is read), ``checks`` (what may be compared), ``stats`` (bootstrap, tests, Holm, power),
``engine`` (the comparison), ``moved`` (what moved), ``comparison`` / ``report`` / ``figures`` (outputs), ``cli``
(``face compare``), ``mlflow_io``. Reference: docs/comparing_systems.md.

The package is callable: ``face.compare(...)`` is ``face.comparison.compare(...)`` whether ``face.compare`` names this
package (once any of its modules is imported, Python binds the package to that name) or the function (``import
face`` exports it lazily).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Comparison", "compare"]
_HOMES = {"compare": "face.comparison.engine", "Comparison": "face.comparison.comparison"}


def __getattr__(name: str) -> Any:
    """``compare`` and ``Comparison``, imported on first use (``face --help`` builds this package's parser only)."""
    if name not in _HOMES:
        raise AttributeError(f"module 'face.comparison' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value
