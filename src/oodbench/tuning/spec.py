"""``tune = {...}`` of an experiment's ``[[detectors]]`` entry, as data.

Common keys (:class:`TuneSpec`): ``protocol`` (a registered tuning protocol,
:mod:`oodbench.tuning.protocol`), ``space`` (a table, or ``"paper"``: the tuning paper's space
for the detector), ``search`` (``"grid"``, ``"tpe"``, ``"gp"``), ``criterion``, ``n_trials``,
``seed``, ``id_val`` and ``ood`` (sources); every other key belongs to the protocol and is
validated as its settings class (:mod:`oodbench.tuning.settings`: the fields' declared valid
values; validating a table loads no training code unless it gives trainer options, ``train``) (``n_variants``, ``held_out_fraction``, ``retrain``,
``train`` for ``held_out_classes``; ``m_grid``, ``n_variants``, ``n_tuning_sets``, ``retrain``,
``train`` for ``held_out_paper``). ``oodbench.run.build.run_tuning`` runs it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    Field,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from oodbench.data.spec import OodSourceSpec, SourceSpec
from oodbench.errors import OodbenchError, UnknownNameError
from oodbench.registry import Registry
from oodbench.schema import Schema

if TYPE_CHECKING:
    from oodbench.tuning.protocol import TuningProtocol

def _protocols() -> Registry[type[TuningProtocol]]:
    """The registry of tuning protocols (imported when an entry is validated, not with the
    schema: its built-in protocols load on first lookup)."""
    from oodbench.tuning.protocol import PROTOCOLS

    return PROTOCOLS


#: spaces an entry may name instead of giving a table (:mod:`oodbench.tuning.paper_space`)
NAMED_SPACES = ("paper",)


class TuneSpec(Schema):
    """``tune = {...}`` of a ``[[detectors]]`` entry: its hyper-parameters are chosen at run time
    by :func:`oodbench.tune` (one cell, with the chosen values and how they were chosen in the
    results' ``hyperparams`` and ``tuning`` columns).

    TOML: ``tune = { protocol = "held_out_classes", space = { percentile = [85, 90, 95] } }``
    (no OOD data: ID classes of ``[id].fit`` are withheld) or ``tune = { protocol = "ood_val",
    ood = "data/ood_val", search = "tpe", n_trials = 40, space = { slope = { low = 0.0,
    high = 5.0 } } }`` (integer bounds make an integer range).
    ``id_val`` (a source) defaults to one image of every ``[id].fit`` class that has two or
    more, the rest of ``[id].fit`` being what the detector fits on while tuning
    (``oodbench.tuning.split.split_by_class`` with ``seed``). The protocol's own keys (held-out:
    ``n_variants``, ``held_out_fraction``, ``retrain`` (``"head"``, ``"full"``, ``"last_block"``
    or ``"scratch"``), ``train``
    (the trainer's options, e.g. ``{ epochs = 30 }``)) sit beside these and are kept in
    ``settings``.

    The tuning paper's own protocol (Mondal et al., arXiv 2602.05935, Algorithms 1-4;
    :mod:`oodbench.tuning.protocols.paper_protocol`) with its search space and Gaussian-process search:
    ``tune = { protocol = "held_out_paper", space = "paper", search = "gp", n_trials = 20,
    m_grid = [1, 2], n_variants = 2, n_tuning_sets = 5, retrain = "head", train = { epochs = 10 }
    }`` (``space = "paper"`` searches with ``"gp"`` unless ``search`` says otherwise; ``n_trials``
    is per M; ``retrain = "scratch", train = { recipe = "cpu-resnet9" }`` trains the variants
    from scratch, ``disjoint_draws = true`` draws Algorithm 2's and 3's sets from disjoint
    halves). The paper's baselines: ``tune = { protocol = "noise", space = "paper", sigmas =
    [32, 64, 128], n_sets = 5 }`` and ``tune = { protocol = "fgsm", space = "paper", eps =
    [0.005, 0.01, 0.1] }`` (:mod:`oodbench.tuning.protocols.synthetic`). ``seed`` seeds the split, the
    variants, the tuning sets and the sampler.
    """

    protocol: StrictStr = Field(description="a tuning protocol: \"ood_val\" (with ood = ...), "
                                "\"held_out_classes\", \"held_out_paper\", \"noise\" or \"fgsm\"")
    space: dict[str, Any] | StrictStr = Field(
        description="the hyper-parameters to search: name = [values] or { low = ..., high = ... }"
                    ", or \"paper\" (the tuning paper's space for the detector)"
    )
    search: Literal["grid", "tpe", "gp"] = "grid"
    criterion: StrictStr | None = None
    n_trials: StrictInt = 50
    seed: StrictInt = 0
    ood: OodSourceSpec | None = None
    id_val: SourceSpec | None = None
    #: the protocol's keys given in the table (validated as its settings class)
    settings: dict[str, Any] | Schema | None = None

    @classmethod
    def prepare(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Move the protocol's own keys into ``settings`` (unknown keys: did-you-mean over the
        common keys and the protocol's: :meth:`TuningProtocol.table_keys`, the fields of its
        settings class)."""
        name = data.get("protocol")
        protocols = _protocols()
        entry = protocols.get(name) if isinstance(name, str) else None
        if "settings" in data:
            raise ValueError("unknown key 'settings'; write the protocol's keys in the tune table")
        common = [k for k in cls.model_fields if k != "settings"]
        own = [] if entry is None else entry.table_keys()
        given = {k: data.pop(k) for k in list(data) if k in own}
        for key in data:
            if key in common:
                continue
            owners = [p.name for p in protocols.values() if key in p.table_keys()]
            if owners and entry is not None:
                raise ValueError(f"{[key]} only go with protocol = \"{owners[0]}\"")
            valid = common + own
            close = difflib.get_close_matches(str(key), valid, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"unknown key {key!r}; {hint}valid keys: {', '.join(valid)}")
        if entry is not None:  # validated as the protocol's settings in _consistent
            from oodbench.tuning.settings import ProtocolSettings

            schema: Any = entry.settings
            data["settings"] = (schema.normalise(given) if issubclass(schema, ProtocolSettings)
                                else schema.model_validate(given, context=info.context))
        if data.get("space") == "paper":
            data.setdefault("search", "gp")  # the paper's search (its spaces are ranges)
        return data

    @field_validator("space")
    @classmethod
    def _named_space(cls, space: dict[str, Any] | str) -> dict[str, Any] | str:
        if isinstance(space, str) and space not in NAMED_SPACES:
            raise ValueError(f"{UnknownNameError('named space', space, NAMED_SPACES)} (or give "
                             "a table of hyper-parameters, e.g. { percentile = [85, 90, 95] })")
        return space

    @field_validator("protocol")
    @classmethod
    def _registered(cls, name: str) -> str:
        protocols = _protocols()
        if name not in protocols:
            close = difflib.get_close_matches(name, list(protocols), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown tuning protocol {name!r}{hint}; expected one of "
                             f"{tuple(protocols)}")
        return name

    @model_validator(mode="after")
    def _consistent(self) -> TuneSpec:
        entry = self.protocol_class
        if entry.uses_ood and self.ood is None:
            raise ValueError(f"protocol = \"{self.protocol}\" needs ood = {{ folder = \"...\" }} "
                             "(the OOD validation images)")
        if not entry.uses_ood and self.ood is not None:
            raise ValueError(f"protocol = \"{self.protocol}\" uses no OOD data; drop ood")
        if self.space == "paper" and self.search == "grid":
            raise ValueError("space = \"paper\" holds ranges, which a grid cannot search; use "
                             "search = \"gp\" (the paper's) or \"tpe\"")
        from oodbench.tuning.space import parse_space

        try:
            entry.parse_settings(self.protocol_settings)
            if isinstance(self.space, dict):
                parse_space(self.space, allow_ranges=self.search != "grid")
        except OodbenchError as err:
            raise ValueError(str(err)) from None
        return self

    @property
    def protocol_class(self) -> type[TuningProtocol]:
        """The registered protocol this entry names."""
        return _protocols()[self.protocol]

    @property
    def given_settings(self) -> dict[str, Any]:
        """The protocol keys given in the file (those left out keep the protocol's defaults)."""
        if self.settings is None:
            return {}
        if isinstance(self.settings, Schema):  # a protocol whose settings are a pydantic schema
            return {k: v for k, v in self.settings.model_dump().items() if v is not None}
        return dict(self.settings)

    @property
    def protocol_settings(self) -> dict[str, Any]:
        """What the protocol gets as ``settings`` (the given keys, with ``seed`` where the
        protocol wants it)."""
        return self.protocol_class.entry_settings(self.given_settings, self.seed)

    @property
    def held_out(self) -> dict[str, Any]:
        """The ``held_out`` settings of ``oodbench.tune`` given in the file (deprecated name of
        :attr:`protocol_settings`)."""
        return self.protocol_settings

    def sources(self, where: str) -> Iterator[tuple[str, SourceSpec]]:
        for key in ("ood", "id_val"):
            spec = getattr(self, key)
            if spec is not None:
                yield f"{where}.tune.{key}", spec

    def describe(self) -> dict[str, Any]:
        out = {k: v for k, v in self.model_dump(exclude={"ood", "id_val", "settings"}).items()
               if v is not None}
        out.update(self.given_settings)
        out.update({k: getattr(self, k).describe() for k in ("ood", "id_val")
                    if getattr(self, k) is not None})
        return out

