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
from importlib import resources
from typing import Any

from oodbench.errors import InvalidInputError, UnknownNameError
from oodbench.schema import loads_toml

#: the protocol names, in the order listings show them
PROTOCOLS = ("paper", "openood", "cood", "cood_code")
_ENTRY_KEYS = {"hyperparams", "fit_data", "grid", "source", "note", "unavailable"}


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


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    text = resources.files("oodbench.detectors").joinpath("presets.toml").read_text("utf-8")
    return loads_toml(text, origin="detectors/presets.toml", error=InvalidInputError)


def protocols() -> dict[str, Protocol]:
    """Every protocol by name."""
    return {name: Protocol(name, **entry) for name, entry in _table()["protocols"].items()}


def _entry(detector: str, protocol: str) -> dict[str, Any] | None:
    return _table()["detectors"].get(detector, {}).get(protocol)


def unavailable_reason(detector: str, protocol: str) -> str | None:
    """Why ``protocol`` has no configuration for ``detector`` (``None`` when it has one)."""
    known = protocols()
    if protocol not in known:
        raise UnknownNameError("detector preset", protocol, known)
    entry = _entry(detector, protocol)
    if entry is None:
        return known[protocol].unavailable or f"no {protocol!r} preset"
    return entry.get("unavailable")


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
    unknown = set(entry) - _ENTRY_KEYS
    if unknown:  # a typo in presets.toml (the tests read every entry)
        raise InvalidInputError(f"presets.toml [{detector}.{protocol}]: unknown keys {sorted(unknown)}")
    grid = entry.get("grid")
    return Preset(
        detector=detector,
        protocol=protocol,
        hyperparams={k: tuple(v) if isinstance(v, list) else v
                     for k, v in entry.get("hyperparams", {}).items()},
        fit_data=entry.get("fit_data"),
        grid=None if grid is None else {k: tuple(v) for k, v in grid.items()},
        source=entry.get("source", ""),
        note=entry.get("note", ""),
    )


def presets_of(detector: str) -> list[str]:
    """The protocols that configure ``detector``, in ``PROTOCOLS`` order."""
    return [p for p in PROTOCOLS if unavailable_reason(detector, p) is None]


def configured_detectors() -> list[str]:
    """Every detector name that ``presets.toml`` mentions."""
    return sorted(_table()["detectors"])
