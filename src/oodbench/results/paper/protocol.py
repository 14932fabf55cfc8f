"""Whether a user's C-OOD results were made under the paper's protocol (levels, window,
estimation split), so that they may be ranked among the published numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd

from oodbench.errors import InvalidInputError
from oodbench.published.compare import Check


def protocol_checks(results: pd.DataFrame) -> list[Check]:
    """How a user's C-OOD rows compare with the paper's benchmark, item by item.

    The C-OOD table's protocol in the published catalogue (``oodbench.published``: 11 severity
    levels, a window of 1,000 classes, the 50,000 ImageNet-1k validation images) checked with
    :func:`oodbench.published.compare.protocol_checks` against the rows' ``n_levels`` (or their
    levels), ``n_classes`` and ``n_id``; then the pool (``n_pool_classes``), which can be shown
    but not verified: the paper's pool is its own filtered ImageNet-21k.
    """
    from oodbench.published import protocol_checks as catalogue_checks
    from oodbench.published import table_info

    checks = catalogue_checks(table_info("cood"), results.assign(level=levels_of(results)))
    pool = None
    if "n_pool_classes" in results.columns and results["n_pool_classes"].notna().any():
        pool = sorted({int(v) for v in results["n_pool_classes"].dropna()})
    return [*checks, Check("OOD pool", "the paper's filtered ImageNet-21k",
                           "not recorded" if pool is None
                           else f"{', '.join(f'{v:,}' for v in pool)} classes (identity not checked)",
                           "unknown")]


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




#: the paper's severity levels: 0 (easiest) .. PAPER_TOP_LEVEL (hardest), at q = level / 10
PAPER_TOP_LEVEL = 10


def paper_positions(results: pd.DataFrame) -> pd.Series:
    """Where each row's severity level lies on the paper's 0..10 axis, as a float.

    Level i of an ``n_levels``-level benchmark is the window at the quantile
    ``q_i = i / (n_levels - 1)`` of the windows' severity order (:mod:`oodbench.benchmarks.severity`),
    and the paper's level j is at ``q = j / 10``; so a row lies at ``10 * q``: its
    ``percentile`` column (``q``, recorded by ``CoodBenchmark``), else ``10 * level /
    (n_levels - 1)``, else its ``level`` as the paper numbers them. Two levels are 0 and 10,
    the easiest and the hardest, not the paper's levels 0 and 1.
    """
    levels = levels_of(results)
    positions = levels.astype(float)
    if "n_levels" in results.columns:
        n = pd.to_numeric(results["n_levels"], errors="coerce")
        several = n.notna() & (n > 1)
        positions[several] = PAPER_TOP_LEVEL * levels[several] / (n[several] - 1)
        positions[n == 1] = 0.0
    if "percentile" in results.columns:
        q = pd.to_numeric(results["percentile"], errors="coerce")
        positions[q.notna()] = PAPER_TOP_LEVEL * q[q.notna()]
    return positions
