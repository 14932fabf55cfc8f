"""Protocol presets: each detector's configuration under each published protocol, as data.

    create("react", preset="openood")     # OpenOOD v1.5: percentile 90, fitted on ID-val
    create("odin", preset="cood_code")    # the official C-OOD code's ODIN variant
    preset_for("knn", "openood").grid     # OpenOOD's sweep: {"k": (50, 100, 200, 500, 1000)}

The values live in ``presets.toml`` next to this file, one table per (detector, protocol) with
its hyper-parameters, the ID data the statistics are fitted on (``fit_data``), OpenOOD's
hyper-parameter sweep where it has one, the source each value was read from, and how the
reference computation differs from oodbench's where it does. Protocols (``PROTOCOLS``):

- ``paper``: the detector's own paper (and its official code);
- ``openood``: OpenOOD v1.5 (``configs/postprocessors/*.yml`` and the postprocessors' ``setup``);
- ``cood``: the C-OOD paper (Galil et al., ICLR 2023);
- ``cood_code``: the official C-OOD code (github.com/mdabbah/COOD_benchmarking).

A protocol that has no configuration for a detector says why (``unavailable``), and asking for
it raises :class:`~oodbench.errors.InvalidInputError` with that reason.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StrictStr, model_validator

from oodbench.errors import InvalidInputError, UnknownNameError
from oodbench.schema import At, NamedEntries, Schema, package_file, parse_toml, unknown_key

#: the protocol names, in the order listings show them
PROTOCOLS = ("paper", "openood", "cood", "cood_code")


@dataclass(frozen=True)
class Protocol:
    """A protocol: its title, where its values come from, and the reason a detector it does
    not configure is given."""

    name: str
    title: str
    source: str
    unavailable: str = ""


@dataclass(frozen=True)
class Preset:
    """One detector's configuration under one protocol.

    Attributes:
        hyperparams: values in oodbench's names (hyper-parameters not listed keep the class
            default).
        fit_data: ``"train"`` or ``"id_val"`` for detectors that fit on ID data, else ``None``.
        grid: OpenOOD's hyper-parameter sweep in its key order (``None``: no search).
        source, note: where the values were read; how the reference computation differs.
    """

    detector: str
    protocol: str
    hyperparams: Mapping[str, Any] = field(default_factory=dict)
    fit_data: str | None = None
    grid: Mapping[str, tuple[Any, ...]] | None = None
    source: str = ""
    note: str = ""

    def values(self) -> dict[str, Any]:
        """The keyword arguments this preset gives the detector class (with ``fit_data``)."""
        out = dict(self.hyperparams)
        if self.fit_data is not None:
            out["fit_data"] = self.fit_data
        return out


def _arrays_as_tuples(values: Any) -> Any:
    if not isinstance(values, Mapping):
        return values
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


class PresetEntry(Schema):
    """``[detectors.<detector>.<protocol>]`` of ``presets.toml``."""

    hyperparams: Annotated[dict[str, Any], BeforeValidator(_arrays_as_tuples)] = Field(
        default_factory=dict)
    fit_data: StrictStr | None = None
    grid: dict[str, tuple[Any, ...]] | None = None
    source: StrictStr = ""
    note: StrictStr = ""
    unavailable: StrictStr | None = None


class PresetsFile(Schema):
    """``presets.toml``: the protocols and, per detector and protocol, its configuration."""

    protocols: NamedEntries[Protocol]
    detectors: dict[str, dict[str, PresetEntry]]

    @model_validator(mode="after")
    def _known_protocols(self) -> PresetsFile:
        for detector, entries in self.detectors.items():
            for protocol in entries:
                if protocol not in self.protocols:
                    raise At(f"[detectors.{detector}]", unknown_key(protocol, list(self.protocols)))
        return self


def parse_presets(text: str, file: str) -> PresetsFile:
    """Presets in the format of ``presets.toml`` (``ConfigError`` naming ``file`` and the key)."""
    return parse_toml(PresetsFile, text, file=file)


@functools.lru_cache(maxsize=1)
def _table() -> PresetsFile:
    text, file = package_file("oodbench.detectors", "presets.toml")
    return parse_presets(text, file)


def protocols() -> dict[str, Protocol]:
    """Every protocol by name."""
    return dict(_table().protocols)


def _entry(detector: str, protocol: str) -> PresetEntry | None:
    return _table().detectors.get(detector, {}).get(protocol)


def unavailable_reason(detector: str, protocol: str) -> str | None:
    """Why ``protocol`` has no configuration for ``detector`` (``None`` when it has one)."""
    known = protocols()
    if protocol not in known:
        raise UnknownNameError("detector preset", protocol, known)
    entry = _entry(detector, protocol)
    if entry is None:
        return known[protocol].unavailable or f"no {protocol!r} preset"
    return entry.unavailable


def preset_for(detector: str, protocol: str) -> Preset:
    """The configuration of ``detector`` under ``protocol`` (errors name the reason when there
    is none, and the valid protocols for an unknown one)."""
    reason = unavailable_reason(detector, protocol)
    if reason is not None:
        have = presets_of(detector)
        raise InvalidInputError(
            f"detector {detector!r} has no {protocol!r} preset: {reason}. Its presets: "
            f"{', '.join(have) or 'none'}"
        )
    entry = _entry(detector, protocol)
    assert entry is not None
    return Preset(detector=detector, protocol=protocol, hyperparams=dict(entry.hyperparams),
                  fit_data=entry.fit_data, grid=None if entry.grid is None else dict(entry.grid),
                  source=entry.source, note=entry.note)


def presets_of(detector: str) -> list[str]:
    """The protocols that configure ``detector``, in ``PROTOCOLS`` order."""
    return [p for p in PROTOCOLS if unavailable_reason(detector, p) is None]


def configured_detectors() -> list[str]:
    """Every detector name that ``presets.toml`` mentions."""
    return sorted(_table().detectors)
