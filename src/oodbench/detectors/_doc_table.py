"""The documentation table of every detector's hyper-parameters, generated from the declarations.

``docs/detectors.md`` is this module's :func:`markdown` (``scripts/make_detector_docs.py`` writes
it; ``tests/detectors/test_declarations.py`` fails when the file is out of date), so the valid
ranges it shows are the ones :meth:`Detector.__post_init__` enforces.
"""

from __future__ import annotations

from oodbench.detectors.base import _REGISTRY, FIT_DATA, declared_hyperparameters

HEADER = """# Detector hyper-parameters

Generated from the declarations in `src/oodbench/detectors/` by `scripts/make_detector_docs.py`;
do not edit by hand (`tests/detectors/test_declarations.py` checks that it is up to date).

Each hyper-parameter declares its valid values in its annotation (`oodbench.constraints`:
`Interval`, `Integer`, `Options`, `Flag`, `Text`, `Validated`); a constraint between
hyper-parameters is a `Check` in the detector's `checks` (rows marked *check*).
`detectors.create` refuses any other value with one line naming the detector, the
hyper-parameter, the value and the valid values. Every detector that fits on ID data also takes
`fit_data`, one of {fit_data} (default: the detector's paper's role; see `oodbench list detectors`).

| detector | hyper-parameter | type | default | valid values | note |
|---|---|---|---|---|---|
"""


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def rows() -> list[tuple[str, ...]]:
    """(detector, hyper-parameter, type, default, valid values, note), one per declared field and
    one per check, detectors in name order, fields in declaration order."""
    out: list[tuple[str, ...]] = []
    for name, cls in sorted(_REGISTRY.items()):
        declared = declared_hyperparameters(cls)
        for field, d in declared.items():
            out.append((name, f"`{field}`", d.type, f"`{d.default!r}`", d.describe(),
                        d.constraint.note))
        for check in cls.checks:
            out.append((name, "*check*", "", "", check.requirement, ""))
        if not declared and not cls.checks:
            out.append((name, "none", "", "", "", ""))
    return out


def markdown() -> str:
    """The whole of ``docs/detectors.md``."""
    body = "".join("| " + " | ".join(_cell(c) for c in row) + " |\n" for row in rows())
    return HEADER.format(fit_data=", ".join(f"`{r!r}`" for r in FIT_DATA)) + body
