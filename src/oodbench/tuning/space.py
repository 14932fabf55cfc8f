"""Search spaces for :func:`oodbench.tune`: value lists (grid and TPE) and ranges (TPE only).

    {"percentile": [85, 90, 95]}                 # a list: every value (grid) / a choice (TPE)
    {"percentile": Range(80.0, 99.5)}            # a continuous range, searched by TPE
    {"k": Range(1, 200, log=True)}               # integer bounds -> an integer range
    {"percentile": {"low": 80, "high": 99.5}}    # the same as a mapping (how TOML writes it)

A space names detector hyper-parameters and the names its protocol declares
(``TuningProtocol.space_params``): ``held_out_fraction`` under the held-out-class protocol (the number of simulated OOD classes is then searched with the rest,
as the tuning paper does). Every name is checked against the detector before anything runs.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oodbench.constraints import Check, check_error, field_error, unknown_names
from oodbench.detectors import Detector, create, detector_class
from oodbench.detectors.base import declared_hyperparameters
from oodbench.errors import InvalidInputError
from oodbench.tuning.protocol import PROTOCOLS, protocol_class
from oodbench.tuning.settings import ProtocolSettings, declared_settings


def protocol_params() -> frozenset[str]:
    """Names a space may hold besides detector hyper-parameters (every protocol's
    ``space_params``)."""
    return frozenset().union(*(p.space_params for p in PROTOCOLS.values()))


@dataclass(frozen=True)
class Range:
    """A numeric interval ``[low, high]`` for TPE: integers when both bounds are ints."""

    low: float
    high: float
    log: bool = False
    step: float | None = None

    def __post_init__(self) -> None:
        if not self.low <= self.high:
            raise InvalidInputError(f"Range needs low <= high; got low={self.low}, high={self.high}")
        if self.log and self.low <= 0:
            raise InvalidInputError(f"a log Range needs low > 0; got {self.low}")

    @property
    def is_int(self) -> bool:
        return isinstance(self.low, int) and isinstance(self.high, int)


Dimension = Range | list[Any]


def parse_space(space: Mapping[str, Any], *, allow_ranges: bool) -> dict[str, Dimension]:
    """Validate ``space`` and return name -> ``Range`` or list of values.

    Raises one-line ``InvalidInputError``s for an empty space, an empty list, a range under grid
    search and a malformed entry.
    """
    if not isinstance(space, Mapping) or not space:
        raise InvalidInputError(
            "tune: the search space is empty; give at least one hyper-parameter, e.g. "
            "{'percentile': [85, 90, 95]}"
        )
    out: dict[str, Dimension] = {}
    for key, values in space.items():
        if isinstance(values, Mapping) and {"low", "high"} <= set(values):
            values = Range(**values)
        if isinstance(values, Range):
            if not allow_ranges:
                raise InvalidInputError(
                    f"tune: grid[{key!r}] is a range; grid search needs a list of values "
                    "(or use search='gp' or 'tpe')"
                )
            out[key] = values
        elif isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise InvalidInputError(
                f"tune: grid[{key!r}] must be a non-empty list of values"
                + (" or a Range" if allow_ranges else "") + f"; got {values!r}"
            )
        else:
            out[key] = list(values)
    return out


def grid_points(space: Mapping[str, Sequence[Any]], first_fastest: bool = False) -> list[dict[str, Any]]:
    """Every combination of a space of lists, in order: the last name varies fastest, or the
    first (``first_fastest``: OpenOOD's ``recursive_generator`` order)."""
    keys = list(space)[::-1] if first_fastest else list(space)
    points = [dict(zip(keys, combo)) for combo in itertools.product(*(space[k] for k in keys))]
    return [{k: p[k] for k in space} for p in points]


def split_point(point: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(detector hyper-parameters, protocol parameters) of one point of a space."""
    params = protocol_params()
    det = {k: v for k, v in point.items() if k not in params}
    return det, {k: v for k, v in point.items() if k in params}


@dataclass(frozen=True)
class DetectorBuilder:
    """point -> detector: the detector class ``cls`` with the ``base`` hyper-parameters (a given
    detector's; none for a registry name, whose defaults apply) overridden by the point's
    (:func:`detector_builder`)."""

    cls: type[Detector]
    base: Mapping[str, Any]
    preset: str = ""
    protocol: str = "ood_val"

    def __call__(self, point: Mapping[str, Any]) -> Detector:
        params = {**self.base, **split_point(point)[0]}
        det = self.cls(**params) if self.base else create(self.cls.name, **params)
        det.preset = self.preset  # the protocol label follows the base detector's preset
        return det

    def values(self) -> dict[str, Any]:
        """The hyper-parameters a point starts from, read from the declarations (the defaults)
        and the base, without building a detector."""
        declared = declared_hyperparameters(self.cls)
        return {**{n: d.default for n, d in declared.items()}, **self.base}


def detector_builder(
    detector_or_name: Detector | str, names: Sequence[str], protocol: str = "ood_val"
) -> DetectorBuilder:
    """A function point -> detector with those hyper-parameters (a registry name's defaults, or
    the given detector's hyper-parameters, overridden by the point).

    Raises when a name of the space is not a hyper-parameter of the detector (nor a parameter of
    ``protocol``), naming the ones it takes.
    """
    if isinstance(detector_or_name, Detector):
        cls, base = type(detector_or_name), dict(detector_or_name.hyperparams)
        preset = detector_or_name.preset
    else:
        cls, base, preset = detector_class(detector_or_name), {}, ""
    valid = {f.name for f in dataclasses.fields(cls) if f.init}
    own = protocol_class(protocol).space_params
    wrong = unknown_names(f"tune: detector {cls.name!r}", [n for n in names if n not in own], valid)
    if wrong:
        raise InvalidInputError(wrong)
    return DetectorBuilder(cls, base, preset, protocol)


#: checks between two fields whose truth is monotone in each: (the test, whether it grows with
#: the first value, whether it grows with the second); a bound then needs only the other's most
#: permissive value
_MONOTONE = {operator.le: (False, True), operator.lt: (False, True),
             operator.ge: (True, False), operator.gt: (True, False)}


def check_bounds(build: DetectorBuilder | Callable[[Mapping[str, Any]], Detector],
                 space: Mapping[str, Any], fixed: Mapping[str, Any] | None = None) -> None:
    """Raise a one-line error when a bound of a ``Range`` (or a value of a list) is outside the
    valid range of its hyper-parameter, before anything is fitted or built.

    Everything is read from the detector's declarations (:mod:`oodbench.constraints`; a
    :class:`DetectorBuilder` gives the class and base values without building a detector, any
    other point -> detector function builds one, for its base configuration): a bound
    must satisfy its field's declaration; a check between fields (VRA's ``lower_percentile <=
    upper_percentile``) must hold for some value the other fields may take -- their fixed
    values (``fixed``, then the builder's base, then the declared defaults) or the ends of
    their dimensions -- so that VRA's lower percentile may reach up to where only a higher upper
    one admits it. For a check that is an order between two fields (``<=``, ``<``, ``>=``,
    ``>``) that is one test against the other's most permissive end; for any other check every
    combination of the other dimensions' ends is tried.
    """
    if isinstance(build, DetectorBuilder):  # everything from the declarations
        cls, values, protocol = build.cls, build.values(), build.protocol
    else:  # any point -> detector function: one detector, for its class and base values
        base = build({})
        cls, values, protocol = type(base), dict(base.hyperparams), "ood_val"
    _check_protocol_bounds(protocol, space)
    names = [n for n in space if n not in protocol_params()]
    if not names:
        return
    values = {**values, **(fixed or {})}
    ends = {n: [space[n].low, space[n].high] if isinstance(space[n], Range) else list(space[n])
            for n in names}
    declared = declared_hyperparameters(cls)
    who = f"detector {cls.name!r}"
    for name in names:
        for value in ends[name]:
            error = field_error(who, name, value, declared[name]) if name in declared else None
            if error is not None:
                raise _outside(space, name, value, error)
    for check in cls.checks:
        searched = [n for n in check.names if n in ends]
        for name in searched:
            for value in ends[name]:
                if not any(check.holds(t) for t in _candidates(check, name, value, ends, values)):
                    raise _outside(space, name, value,
                                   check_error(who, check, {**values, name: value}))


def _candidates(check: Check, name: str, value: Any, ends: Mapping[str, list[Any]],
                values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The values of ``check``'s fields to try with ``name = value``: the fixed values, and the
    other searched fields' ends (the most permissive one for an order between two fields)."""
    base = {**values, name: value}
    others = [n for n in check.names if n in ends and n != name]
    if not others:
        return [base]
    monotone = _MONOTONE.get(check.test) if len(check.names) == 2 else None
    if monotone is not None:
        (other,) = others
        grows_with_other = monotone[check.names.index(other)]
        permissive = max(ends[other]) if grows_with_other else min(ends[other])
        return [base, {**base, other: permissive}]
    return [base] + [{**base, **dict(zip(others, combo))}
                     for combo in itertools.product(*(ends[n] for n in others))]


def _check_protocol_bounds(protocol: str, space: Mapping[str, Any]) -> None:
    """The space's protocol parameters (``held_out_fraction``) against the declarations of the
    protocol's settings of the same name."""
    entry = protocol_class(protocol)
    schema: Any = entry.settings
    declared = declared_settings(schema) if issubclass(schema, ProtocolSettings) else {}
    for name in entry.space_params & set(space) & set(declared):
        dim = space[name]
        for value in [dim.low, dim.high] if isinstance(dim, Range) else list(dim):
            error = field_error(entry.name, name, value, declared[name])
            if error is not None:
                raise _outside(space, name, value, error)


def _outside(space: Mapping[str, Any], name: str, value: Any,
             error: InvalidInputError | None) -> InvalidInputError:
    kind = "bound" if isinstance(space[name], Range) else "value"
    return InvalidInputError(f"tune: space[{name!r}] {kind} {value!r} is outside the valid range: "
                             f"{error}")
