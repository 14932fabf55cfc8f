"""The tuning paper's search spaces, per detector, as data: ``oodbench.tune(name, "paper", ...)``.

Mondal, Xie, Duan, Wong & Sundaramoorthi, arXiv 2602.05935, Appendix A: ASH-B's percentile,
ReAct's tau over the range of the ID activations, KNN's K in [1, 500], VRA+'s (eta_alpha, u,
gamma) and PLF's seven parameters. The intervals live in ``spaces.toml`` beside this file (with
the sentence of App. A each comes from, and what oodbench chose where App. A gives no number);
this module reads them and resolves the bounds that are statistics of the ID fit data.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any

import numpy as np
from pydantic import ConfigDict, Field, PlainValidator, RootModel, StrictStr, ValidationInfo

from oodbench.errors import InvalidInputError
from oodbench.extract.activations import Activations
from oodbench.schema import Schema, package_file, parse_toml, unknown_key
from oodbench.tuning.space import Range

#: bounds that name a statistic of the ID fit features -> the statistic
_FIT_STATISTICS = {"id_min": np.min, "id_max": np.max}



def _bound(value: Any) -> int | float | str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value in _FIT_STATISTICS:
        return value
    raise ValueError(f"expected a number or one of {', '.join(map(repr, _FIT_STATISTICS))}, "
                     f"got {value!r}")


#: a bound: a number, or the name of a statistic of the ID fit features
Bound = Annotated[int | float | str, PlainValidator(_bound)]


class Interval(Schema):
    """``name = { low = ..., high = ... }``: one hyper-parameter's interval."""

    low: Bound = Field(description="the lower bound: a number, \"id_min\" or \"id_max\"")
    high: Bound = Field(description="the upper bound: a number, \"id_min\" or \"id_max\"")


class DetectorSpace(Schema):
    """``[<detector>]`` of ``spaces.toml``: where the space comes from and, for every other key,
    a hyper-parameter's :class:`Interval`."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, Interval] = Field(init=False)  # type: ignore[assignment]

    source: StrictStr = ""
    note: StrictStr = ""

    @classmethod
    def prepare(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        for key, value in data.items():
            if key not in cls.model_fields and not isinstance(value, dict):  # no interval: a typo?
                raise ValueError(unknown_key(key, [*cls.model_fields, "<hyper-parameter>"]))
        return data

    @property
    def intervals(self) -> dict[str, Interval]:
        """Hyper-parameter -> its interval, in file order."""
        return dict(self.__pydantic_extra__ or {})


class SpacesFile(RootModel[dict[str, DetectorSpace]]):
    """``spaces.toml``: one ``[<detector>]`` table per detector."""


def parse_spaces(text: str, file: str) -> dict[str, DetectorSpace]:
    """Spaces in the format of ``spaces.toml`` (``ConfigError`` naming ``file`` and the key)."""
    return parse_toml(SpacesFile, text, file=file).root


@functools.cache
def _table() -> dict[str, DetectorSpace]:
    return parse_spaces(*package_file("oodbench.tuning", "spaces.toml"))


def paper_detectors() -> list[str]:
    """The detectors App. A gives a search space for."""
    return sorted(_table())


def paper_source(detector: str) -> str:
    """Where ``detector``'s paper space comes from (and oodbench's choice where App. A is silent)."""
    entry = _entry(detector)
    return " ".join(text for text in (entry.source, entry.note) if text)


def _entry(detector: str) -> DetectorSpace:
    table = _table()
    if detector not in table:
        raise InvalidInputError(
            f"tune: the tuning paper (arXiv 2602.05935, App. A) gives no search space for "
            f"{detector!r}; it has spaces for {', '.join(sorted(table))} (or pass a dict)"
        )
    return table[detector]


def paper_space_names(detector: str) -> list[str]:
    """The hyper-parameters ``detector``'s space of App. A searches."""
    return list(_entry(detector).intervals)


def paper_space(detector: str, fit: Activations | None = None, *, checkable: bool = False
                ) -> dict[str, Range]:
    """``detector``'s space of App. A as ``Range``s; bounds like ``"id_max"`` are computed from
    the features of ``fit`` (the ID fit activations), which they then need. ``checkable``:
    only the ranges whose bounds are numbers (what can be checked before any data is read)."""
    out: dict[str, Range] = {}
    for name, interval in _entry(detector).intervals.items():
        if checkable and any(isinstance(b, str) for b in (interval.low, interval.high)):
            continue
        low, high = (_resolve(bound, detector, name, fit) for bound in (interval.low, interval.high))
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
