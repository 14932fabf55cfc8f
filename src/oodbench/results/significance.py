"""Is a leaderboard row really better than the next? DeLong tests on the kept per-cell scores.

A leaderboard value is a mean AUROC over a benchmark's OOD groups. Two neighbouring rows are
compared with :func:`oodbench.metrics.delong.mean_auroc_test` on the scores that ``oodbench
run`` keeps in ``<output>/scores/<cell>.npz``:

- the ID scores are paired when both cells scored the same number of ID samples (one ID set
  for both: the same model with two detectors, or two models on the same ID images);
- the OOD groups are paired on standard benchmarks (fixed sets, same sizes); C-OOD severity
  levels are built per (model, detector), so their OOD sides are treated as independent, which
  errs towards "not significant".
"""

from __future__ import annotations

import pandas as pd

from oodbench.metrics.delong import Comparison, mean_auroc_test
from oodbench.results.leaderboard import KEYS, is_severity, ok_rows
from oodbench.results.table import ResultsTable


def compare_cells(table: ResultsTable, a: str, b: str, *, severity: bool) -> Comparison | None:
    """DeLong test of the mean AUROC of cell ``a`` against cell ``b`` (None: scores not kept)."""
    first, second = table.load_scores(a), table.load_scores(b)
    if first is None or second is None or set(first[1]) != set(second[1]):
        return None
    paired_groups = not severity and all(first[1][g].size == second[1][g].size for g in first[1])
    return mean_auroc_test(first, second, paired_id=first[0].size == second[0].size,
                           paired_groups=paired_groups)


def versus_above(
    rows: pd.DataFrame, benchmark: str, board: pd.DataFrame, table: ResultsTable,
    *, alpha: float = 0.05,
) -> list[str]:
    """For each leaderboard row, its mean-AUROC difference to the row above and the test's
    p-value, ``"n.s."`` when ``p >= alpha``; empty for the first row, a note where no scores
    were kept."""
    cells = ok_rows(rows, benchmark).groupby(KEYS, observed=True)["cell"].first()
    severity = is_severity(rows, benchmark)
    keys = list(zip(board["model"], board["detector"], board["hyperparams"]))
    out = [""]
    for above, here in zip(keys, keys[1:]):
        test = compare_cells(table, cells[here], cells[above], severity=severity)
        if test is None:
            out.append("no scores kept")
            continue
        p = "p < 0.001" if test.p_value < 0.001 else f"p = {test.p_value:.3f}"
        out.append(f"{test.difference:+.4f}, {p}" + (" (n.s.)" if not test.significant(alpha)
                                                       else ""))
    return out
