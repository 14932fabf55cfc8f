"""A ``[[detectors]]`` entry of an experiment, as data: a detector, its fixed hyper-parameters,
a grid (one cell per combination) or a ``tune`` table, and the preset it starts from.

It lives in ``run`` rather than ``detectors`` because it composes two domains (a detector
configuration and a :class:`~oodbench.tuning.spec.TuneSpec`).
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from pydantic import Field, PrivateAttr, StrictStr, ValidationInfo, field_validator, model_validator

from oodbench.errors import OodbenchError, UnknownNameError
from oodbench.params import Params
from oodbench.schema import DeprecatedKeyWarning, NonEmptyArray, Schema, context_of
from oodbench.tuning.spec import TuneSpec

#: names that expand to every registered detector that applies to a model
ALL_DETECTORS = "all"


def check_preset(value: str | None) -> str | None:
    """``value`` when it is a known preset, ``""`` or ``None``; else a ``ValueError``."""
    from oodbench.detectors.presets import protocols as preset_names

    if value and value not in preset_names():
        raise ValueError(str(UnknownNameError("preset", value, preset_names())))
    return value


def renamed_key(data: dict[str, Any], info: ValidationInfo, where: str, old: str = "protocol",
                new: str = "preset") -> str:
    """Accept the deprecated key ``old`` for ``new`` (with a ``DeprecatedKeyWarning``); returns
    the key the file used (so messages can name it)."""
    if old not in data:
        return new
    if new in data:
        raise ValueError(f"give {new} only ({old} is its deprecated name)")
    file = context_of(info).get("file", "experiment")
    warnings.warn(f"{file}: {where}: the key {old!r} is deprecated; call it {new!r} "
                  f"({new} = {data[old]!r})", DeprecatedKeyWarning, stacklevel=2)
    data[new] = data.pop(old)
    return old


class DetectorSpec(Schema):
    """A detector with fixed hyper-parameters and an optional grid (one cell per combination).

    TOML: ``"msp"``, ``{ name = "react", hyperparams = { percentile = 90 } }`` or
    ``{ name = "knn", grid = { k = [10, 50] } }``; the name ``"all"`` stands for every
    registered detector that applies to the model. ``tune = {...}`` (:class:`TuneSpec`) chooses
    the hyper-parameters of its ``space`` at run time instead of a grid. ``preset`` (formerly
    ``protocol``, still accepted with a warning) overrides the experiment's.

    Validation freezes what the plan reads: every hyper-parameter setting of the entry
    (:attr:`settings`, the grid expanded once) and its ``tune`` table as the results record it
    (:attr:`tune_record`); the preset an entry starts from depends on its experiment's, so the
    experiment freezes that (``Experiment.detector_presets``).
    """

    shorthand = "name"

    name: StrictStr = Field(description="a registered detector, or \"all\"")
    hyperparams: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, NonEmptyArray] = Field(default_factory=dict)
    tune: TuneSpec | None = None
    preset: StrictStr | None = Field(
        None, description="a preset (\"paper\", \"openood\", \"cood\", \"cood_code\"); \"\" = none")

    _settings: tuple[Mapping[str, Any], ...] = PrivateAttr(default=())
    _tune_record: Params = PrivateAttr(default_factory=Params)

    @classmethod
    def prepare(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        renamed_key(data, info, f"[[detectors]] {data.get('name', '')!r}")
        return data

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, value: str | None) -> str | None:
        return check_preset(value)

    @model_validator(mode="after")
    def _valid_configurations(self) -> DetectorSpec:
        both = sorted(set(self.hyperparams) & set(self.grid))
        if both:
            raise ValueError(f"{both} appear in both hyperparams and grid; keep one")
        if self.name == ALL_DETECTORS:
            if self.hyperparams or self.grid or self.tune:
                raise ValueError("\"all\" takes no hyperparams, grid or tune; list detectors by name")
        else:
            self.check(self.preset)
        self._settings = tuple(MappingProxyType(config) for config in self._expanded())
        self._tune_record = Params(self.tune.describe()) if self.tune is not None else Params()
        return self

    def check(self, preset: str | None) -> None:
        """Raise ``ValueError`` unless the detector exists, declares every hyper-parameter the
        entry names, and ``preset`` configures it: from the declarations, without building a
        detector (the plan builds each configuration once, which checks the values). A tuned
        entry's search space is checked here against the declared valid ranges
        (``tune.space.check_bounds``, which builds one detector for the base values)."""
        from oodbench import detectors

        try:
            detectors.check_configuration(self.name, [*self.hyperparams, *self.grid],
                                          preset or None)
            if self.tune is not None:
                self._check_tune()
        except OodbenchError as err:
            raise ValueError(str(err)) from None
        except (TypeError, ValueError) as err:
            raise ValueError(f"invalid hyper-parameters for {self.name!r}: {err}") from None

    def chosen_preset(self, default: str | None) -> str | None:
        """The preset this entry's detectors start from: its own ``preset`` (``""``: none),
        else the experiment's."""
        chosen = default if self.preset is None else self.preset
        return chosen or None

    def _check_tune(self) -> None:
        from oodbench.tuning.paper_space import paper_space, paper_space_names
        from oodbench.tuning.space import check_bounds, detector_builder, grid_points, parse_space

        assert self.tune is not None
        if self.grid:
            raise ValueError("tune searches its own space; give either grid or tune, not both")
        space = self.tune.space
        dims = (paper_space(self.name, checkable=True) if isinstance(space, str)
                else parse_space(space, allow_ranges=self.tune.search != "grid"))
        names = list(paper_space_names(self.name)) if isinstance(space, str) else list(dims)
        both = sorted(set(self.hyperparams) & set(names))
        if both:
            raise ValueError(f"{both} appear in both hyperparams and tune.space; keep one")
        build = detector_builder(self.name, names, self.tune.protocol)
        lists = {k: v for k, v in dims.items() if isinstance(v, list)}
        for point in grid_points(lists):  # every listed value is valid
            build({**self.hyperparams, **point})
        check_bounds(build, dims, fixed=self.hyperparams)  # and every bound

    @property
    def settings(self) -> tuple[Mapping[str, Any], ...]:
        """Every hyper-parameter setting this entry stands for, read-only, as the file gives
        them (the grid's cartesian product, expanded once on validation; a tuned entry stands
        for its fixed ``hyperparams``, the rest is chosen at run time)."""
        return self._settings

    @property
    def tune_record(self) -> Params:
        """The ``tune`` table as cell keys and results record it (``TuneSpec.describe()``,
        frozen on validation); empty when the entry is not tuned."""
        return self._tune_record

    def configurations(self) -> list[dict[str, Any]]:
        """:attr:`settings` as new dicts."""
        return [dict(config) for config in self._settings]

    def _expanded(self) -> list[dict[str, Any]]:
        keys = sorted(self.grid)
        combos = itertools.product(*(self.grid[k] for k in keys))
        return [{**dict(self.hyperparams), **dict(zip(keys, values))} for values in combos]

    def describe(self) -> dict[str, Any]:
        out = {"name": self.name, "hyperparams": dict(self.hyperparams),
               "grid": {k: list(v) for k, v in self.grid.items()}}
        if self.tune is not None:
            out["tune"] = self.tune.describe()
        if self.preset is not None:
            out["preset"] = self.preset
        return out
