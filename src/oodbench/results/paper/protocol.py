"""Whether a user's C-OOD results were made under the paper's protocol (levels, window,
estimation split), so that they may be ranked among the published numbers."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from oodbench.errors import InvalidInputError


@dataclass(frozen=True)
class ProtocolCheck:
    """One property of a C-OOD benchmark, as the paper ran it and as a user's results show it.

    ``status``: ``"same"``, ``"differs"`` or ``"unknown"`` (the results do not record it).
    """

    item: str
    paper: str
    yours: str
    status: str


#: the paper's benchmark (Galil et al. 2023, Sec. 4 and the official code's defaults)
PAPER_PROTOCOL = {
    "n_levels": 11,
    "window": 1000,  # classes per level = the number of ID classes
    "n_id": 50_000,  # the ImageNet-1k validation set
}


def _one_value(results: pd.DataFrame, column: str) -> set[int] | None:
    if column not in results.columns or results[column].isna().all():
        return None
    return {int(v) for v in results[column].dropna()}


def _check(item: str, paper: int, found: set[int] | None, what: str) -> ProtocolCheck:
    if found is None:
        return ProtocolCheck(item, f"{paper:,}", "not recorded", "unknown")
    shown = ", ".join(f"{v:,}" for v in sorted(found))
    return ProtocolCheck(item, f"{paper:,}", f"{shown} {what}".strip(),
                         "same" if found == {paper} else "differs")


def protocol_checks(results: pd.DataFrame) -> list[ProtocolCheck]:
    """How a user's C-OOD rows compare with the paper's benchmark, item by item.

    Read from the rows: the severity levels (``level``; ``n_levels`` when recorded), the window
    (``n_classes`` per level), the ID test set size (``n_id``) and the pool (``n_pool_classes``,
    which can be shown but not verified: the paper's pool is its own filtered ImageNet-21k).
    """
    levels = set(levels_of(results).tolist())
    recorded = _one_value(results, "n_levels")
    paper_levels = PAPER_PROTOCOL["n_levels"]
    if recorded is not None:
        n_levels = _check("severity levels", paper_levels, recorded, "levels")
    elif max(levels) >= paper_levels:
        n_levels = ProtocolCheck("severity levels", f"{paper_levels}",
                                 f"levels up to {max(levels)}", "differs")
    else:
        n_levels = ProtocolCheck("severity levels", f"{paper_levels}",
                                 f"levels {sorted(levels)} (total not recorded)", "unknown")
    pool = _one_value(results, "n_pool_classes")
    return [
        n_levels,
        _check("window (OOD classes per level)", PAPER_PROTOCOL["window"],
               _one_value(results, "n_classes"), ""),
        _check("ID test images (ImageNet-1k validation)", PAPER_PROTOCOL["n_id"],
               _one_value(results, "n_id"), ""),
        ProtocolCheck("OOD pool", "the paper's filtered ImageNet-21k",
                      "not recorded" if pool is None
                      else f"{', '.join(f'{v:,}' for v in sorted(pool))} classes (identity not checked)",
                      "unknown"),
    ]


def levels_of(results: pd.DataFrame) -> pd.Series:
    """The severity level of every row (the ``level`` column, or ``level_<i>`` groups)."""
    if "level" in results.columns:
        return results["level"].astype(np.int64)
    if "group" in results.columns:
        parsed = results["group"].astype(str).str.extract(r"^level_(\d+)$")[0]
        if parsed.isna().any():
            raise InvalidInputError(
                "results 'group' values must look like 'level_3' (CoodBenchmark rows)"
            )
        return parsed.astype(np.int64)
    raise InvalidInputError(
        "results need a 'level' column (or CoodBenchmark's 'group' = 'level_<i>'); got columns "
        f"{list(results.columns)}"
    )


