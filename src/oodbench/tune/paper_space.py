"""The tuning paper's search spaces, per detector, as data: ``oodbench.tune(name, "paper", ...)``.

Mondal, Xie, Duan, Wong & Sundaramoorthi, arXiv 2602.05935, Appendix A: ASH-B's percentile,
ReAct's tau over the range of the ID activations, KNN's K in [1, 500], VRA+'s (eta_alpha, u,
gamma) and PLF's seven parameters. The intervals live in ``spaces.toml`` beside this file (with
the sentence of App. A each comes from, and what oodbench chose where App. A gives no number);
this module reads them and resolves the bounds that are statistics of the ID fit data.
"""

from __future__ import annotations

import functools
import sys
from importlib import resources
from typing import Any

import numpy as np

from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations
from oodbench.tune.space import Range

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

#: keys of a space table that are not hyper-parameters
_META = ("source", "note")
#: bounds that name a statistic of the ID fit features -> the statistic
_FIT_STATISTICS = {"id_min": np.min, "id_max": np.max}


@functools.cache
def _table() -> dict[str, dict[str, Any]]:
    text = resources.files("oodbench.tune").joinpath("spaces.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def paper_detectors() -> list[str]:
    """The detectors App. A gives a search space for."""
    return sorted(_table())


def paper_source(detector: str) -> str:
    """Where ``detector``'s paper space comes from (and oodbench's choice where App. A is silent)."""
    entry = _entry(detector)
    return " ".join(str(entry[k]) for k in _META if k in entry)


def _entry(detector: str) -> dict[str, Any]:
    table = _table()
    if detector not in table:
        raise InvalidInputError(
            f"tune: the tuning paper (arXiv 2602.05935, App. A) gives no search space for "
            f"{detector!r}; it has spaces for {', '.join(sorted(table))} (or pass a dict)"
        )
    return table[detector]


def paper_space_names(detector: str) -> list[str]:
    """The hyper-parameters ``detector``'s space of App. A searches."""
    return [name for name in _entry(detector) if name not in _META]


def paper_space(detector: str, fit: Activations | None = None, *, checkable: bool = False
                ) -> dict[str, Range]:
    """``detector``'s space of App. A as ``Range``s; bounds like ``"id_max"`` are computed from
    the features of ``fit`` (the ID fit activations), which they then need. ``checkable``:
    only the ranges whose bounds are numbers (what can be checked before any data is read)."""
    out: dict[str, Range] = {}
    for name, bounds in _entry(detector).items():
        if name in _META:
            continue
        if checkable and any(isinstance(bounds[k], str) for k in ("low", "high")):
            continue
        low, high = (_resolve(bounds[k], detector, name, fit) for k in ("low", "high"))
        out[name] = Range(low, high)
    return out


def _resolve(bound: Any, detector: str, name: str, fit: Activations | None) -> Any:
    if not isinstance(bound, str):
        return bound
    if fit is None or fit.features is None:
        raise InvalidInputError(
            f"tune: the paper's space for {detector!r} bounds {name} by {bound!r} of the ID "
            "activations; pass fit= (ID training activations with features)"
        )
    return float(_FIT_STATISTICS[bound](fit.features))
