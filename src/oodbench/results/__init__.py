"""oodbench.results (see DESIGN.md): the results table, leaderboards, plots, reports, paper results.

    from oodbench.results import ResultsTable, wide, write_report
    table = ResultsTable("results/run1").read()        # tidy rows (table.SCHEMA)
    wide(table)["auroc"]                                # one row per (model, detector, group)
    write_report("results/run1")                        # report.html + report.md

Submodules: ``table`` (Parquet results and per-cell scores), ``leaderboard``, ``plots``,
``report``, ``paper`` (the published C-OOD results). Imports are lazy: ``import
oodbench.results`` loads neither pandas' Parquet engine nor matplotlib.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "ResultsTable": ("oodbench.results.table", "ResultsTable"),
    "wide": ("oodbench.results.table", "to_wide"),
    "write_report": ("oodbench.results.report", "write_report"),
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'oodbench.results' has no attribute {name!r}")
