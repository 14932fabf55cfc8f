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


