"""How a detector configuration is named wherever it is shown: the plan and ``--dry-run``,
progress and failure lines, the terminal leaderboard, the HTML and Markdown reports.

One form everywhere::

    knn (k=5) [openood, fit on train, tuned by held_out_classes]
    ^name ^values  ^preset ^fit data    ^tuning protocol

``values`` are the hyper-parameters worth showing (a plan shows all of them, a leaderboard the
ones that tell its rows apart plus the ones tuning chose); a value still to be chosen by tuning
shows its search space (``k in [1, 2]``, ``slope in 0.0..5.0``). ``fit_data`` is never among the
values: it is the ``fit on`` note. A preset changed by hand reads ``openood (modified: k)`` (see
:attr:`oodbench.detectors.Detector.protocol`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def search_space_text(dimension: Any) -> str:
    """A tuning dimension as shown in a label: ``in [1, 2]`` (values) or ``in 0.0..5.0`` (a
    range ``{low, high}``)."""
    if isinstance(dimension, Mapping) and {"low", "high"} <= set(dimension):
        return f"in {dimension['low']}..{dimension['high']}"
    if isinstance(dimension, (list, tuple)):
        return f"in [{', '.join(str(v) for v in dimension)}]"
    return f"in {dimension}"


def configuration_label(
    name: str,
    values: Mapping[str, Any] | None = None,
    *,
    preset: str = "",
    fit_data: str = "",
    tuned_by: str = "",
    to_tune: Mapping[str, Any] | None = None,
) -> str:
    """``name (k=v, ...) [preset, fit on <fit_data>, tuned by <protocol>]`` (parts left out
    when empty; ``fit_data`` ``"none"`` is left out). ``to_tune``: dimensions still to be
    chosen, shown as their search space in place of a value."""
    shown = [f"{k}={v}" for k, v in (values or {}).items()
             if k != "fit_data" and k not in (to_tune or {})]
    shown += [f"{k} {search_space_text(v)}" for k, v in (to_tune or {}).items()]
    notes = [preset] if preset else []
    if fit_data and fit_data != "none":
        notes.append(f"fit on {fit_data}")
    if tuned_by:
        notes.append(f"tuned by {tuned_by}")
    label = f"{name} ({', '.join(shown)})" if shown else name
    return f"{label} [{', '.join(notes)}]" if notes else label
