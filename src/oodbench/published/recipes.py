"""Recipes: everything a published number depends on, as data beside the published tables.

A recipe file (``_tables/recipes/<family>.toml``, one per method family) holds the recipes of
that family's published rows. Every setting is a *sourced value*::

    crop_fraction = { value = 0.875, source = "MOODv1/datasets.py:210-211 (Resize(256), CenterCrop(224))" }

``value`` is the literal ``"unknown"`` where the paper and its code do not state the setting
(or where oodbench has not read it: the ``source`` then says so); it is never guessed. The
sections of a recipe, and the settings each may hold (:data:`SECTIONS`):

- ``model``: ``spec`` (the oodbench spec of the architecture and its weights), ``weights``
  (the exact weights tag or checkpoint), ``released`` (whether those weights were released),
  ``file`` (where the spec's loader reads a released checkpoint file, relative to the data
  root: ``reproduce`` loads it from there, its source saying where to download it),
  ``num_classes`` (the head's outputs where they are not the ID classes: MOS's 1000 + 8);
- ``preprocessing``: ``resize``, ``crop_fraction``, ``interpolation``, ``mean``, ``std``;
- ``training`` (only where the method trains): ``method``, ``loss``, ``loss_params``,
  ``trainable``, ``optimizer``, ``lr``, ``weight_decay``, ``schedule``, ``warmup``,
  ``batch_size``, ``epochs``, ``augmentation``, ``precision``, ``prompts``;
- ``detector``: ``name``, ``preset``, ``hyperparams``;
- ``evaluation``: ``fit_data``, ``fit_transform`` (the transform the fit data is read with,
  a name of :mod:`oodbench.models.fit_transforms`; absent: the evaluation transform),
  ``tuning``, ``benchmark``, ``id_set``, ``ood_set``, ``metrics``, ``metric_convention``.

``rows`` says which published rows the recipe is the recipe of: a list of selectors, each a
table of catalogue columns (``table``, ``method``, ``backbone``, ``tuning``, ...) whose values a
row must have. Every row is the row of at most one recipe (:func:`row_recipes` refuses two).
A file's ``[defaults]`` sections lie beneath every recipe of the file;
``base = "<recipe>"`` starts a recipe from another of the same file (section by section; its
own settings replace the base's, ``rows`` is never inherited). ``model.released = false``
marks rows whose weights were never released: reproducing them needs a training run (where
the recipe has one) or weights of your own.

A malformed file raises :class:`~oodbench.errors.ConfigError` naming the file, the recipe and
the key (:func:`parse_recipe_file`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import pandas as pd
from pydantic import Field, StrictStr, field_validator, model_validator

from oodbench.errors import ConfigError, InvalidInputError, UnknownNameError
from oodbench.models.fit_transforms import check_fit_transform
from oodbench.schema import Schema, loads_toml, parse

#: the literal of a setting that the paper (and its code) does not state
UNKNOWN = "unknown"
#: the columns a row selector may name (the catalogue's keys)
SELECTOR_KEYS = ("table", "method", "backbone", "training", "tuning", "detector", "preset",
                 "metric", "ood_set", "paper_table")
RECIPE_FOLDER = "_tables/recipes"


class Sourced(Schema):
    """One setting: its value (``"unknown"`` when not stated) and where it was read."""

    value: Any = Field(description="the setting, or the literal \"unknown\"")
    source: StrictStr = Field(description="official code file:line, or the paper's section")

    @field_validator("source")
    @classmethod
    def _stated(cls, source: str) -> str:
        if not source.strip():
            raise ValueError("every value needs its source (official code file:line or the "
                             "paper's section)")
        return source

    @property
    def known(self) -> bool:
        """Whether the value is stated (not the literal ``"unknown"``)."""
        return not (isinstance(self.value, str) and self.value == UNKNOWN)


Setting = Sourced | None


class ModelSection(Schema):
    """``[model]``: the oodbench spec, the exact weights, whether they were released, the
    checkpoint file below the data root, the head's size."""

    spec: Setting = None
    weights: Setting = None
    released: Setting = None
    file: Setting = None
    num_classes: Setting = None


class PreprocessingSection(Schema):
    """``[preprocessing]``: the evaluation transform."""

    resize: Setting = None
    crop_fraction: Setting = None
    interpolation: Setting = None
    mean: Setting = None
    std: Setting = None


class TrainingSection(Schema):
    """``[training]``: the training recipe, where the method trains."""

    method: Setting = None
    loss: Setting = None
    loss_params: Setting = None
    trainable: Setting = None
    optimizer: Setting = None
    lr: Setting = None
    weight_decay: Setting = None
    schedule: Setting = None
    warmup: Setting = None
    batch_size: Setting = None
    epochs: Setting = None
    augmentation: Setting = None
    precision: Setting = None
    prompts: Setting = None


class DetectorSection(Schema):
    """``[detector]``: the oodbench detector, its preset and hyper-parameters."""

    name: Setting = None
    preset: Setting = None
    hyperparams: Setting = None


class EvaluationSection(Schema):
    """``[evaluation]``: fit data, tuning protocol, benchmark, ID and OOD sets, metrics."""

    fit_data: Setting = None
    fit_transform: Setting = None
    tuning: Setting = None
    benchmark: Setting = None
    id_set: Setting = None
    ood_set: Setting = None
    metrics: Setting = None
    metric_convention: Setting = None

    @field_validator("fit_transform")
    @classmethod
    def _known_fit_transform(cls, setting: Setting) -> Setting:
        if setting is not None and setting.known:
            try:
                check_fit_transform(str(setting.value))
            except UnknownNameError as err:
                raise ValueError(str(err)) from None
        return setting


#: section -> its schema (unknown keys are refused, naming the valid ones)
SECTION_SCHEMAS: dict[str, type[Schema]] = {
    "model": ModelSection, "preprocessing": PreprocessingSection, "training": TrainingSection,
    "detector": DetectorSection, "evaluation": EvaluationSection}
#: section -> the settings it may hold
SECTIONS: dict[str, tuple[str, ...]] = {n: tuple(c.model_fields) for n, c in SECTION_SCHEMAS.items()}


class RecipeEntry(Schema):
    """One ``[recipes.<id>]`` table, after its ``base`` was merged in."""

    title: StrictStr = ""
    rows: tuple[dict[str, StrictStr], ...] = Field(
        description="selectors of the published rows this is the recipe of")
    note: StrictStr = ""
    model: ModelSection
    preprocessing: PreprocessingSection
    training: TrainingSection | None = None
    detector: DetectorSection
    evaluation: EvaluationSection

    @field_validator("rows")
    @classmethod
    def _selectors(cls, rows: tuple[dict[str, str], ...]) -> tuple[dict[str, str], ...]:
        if not rows:
            raise ValueError("a recipe needs at least one row selector, e.g. "
                             "{ table = \"imagenet1k-vs-sun\", method = \"...\" }")
        for i, row in enumerate(rows):
            bad = sorted(set(row) - set(SELECTOR_KEYS))
            if bad:
                raise ValueError(f"rows[{i}] names {bad}; a selector takes {list(SELECTOR_KEYS)}")
            if "table" not in row:
                raise ValueError(f"rows[{i}] needs `table`")
        return rows

    @model_validator(mode="after")
    def _required(self) -> RecipeEntry:
        for section, key in (("model", "spec"), ("detector", "name"), ("evaluation", "benchmark"),
                             ("evaluation", "metrics")):
            if getattr(getattr(self, section), key) is None:
                raise ValueError(f"[{section}] needs `{key}` (its value may be \"{UNKNOWN}\")")
        return self


class RecipeFile(Schema):
    """A recipe file: the family's name, its paper and code, and its recipes by id."""

    family: StrictStr
    title: StrictStr
    paper: StrictStr
    code: StrictStr = ""
    recipes: dict[str, RecipeEntry]


@dataclass(frozen=True)
class Recipe:
    """A recipe with its id, its family's file and paper (see the module docstring)."""

    id: str
    family: str
    file: str
    paper: str
    code: str
    entry: RecipeEntry

    def section(self, name: str) -> dict[str, Sourced]:
        """The stated and ``unknown`` settings of a section (absent ones left out)."""
        value = getattr(self.entry, name)
        if value is None:
            return {}
        return {k: v for k, v in value if v is not None}

    def value(self, section: str, key: str, default: Any = None) -> Any:
        """The value of a setting; ``default`` when absent or ``unknown``."""
        got = self.section(section).get(key)
        return got.value if got is not None and got.known else default

    @property
    def trains(self) -> bool:
        """Whether the method trains (its recipe has a ``[training]`` section)."""
        return self.entry.training is not None

    def unknown(self) -> list[str]:
        """``section.key`` of every setting whose value is ``unknown``."""
        return [f"{s}.{k}" for s in SECTIONS for k, v in self.section(s).items() if not v.known]

    def matches(self, row: Mapping[str, Any]) -> bool:
        """Whether ``row`` (a catalogue row with its ``table``) is one of this recipe's rows."""
        return any(all(str(row.get(k, "")) == v for k, v in sel.items())
                   for sel in self.entry.rows)


def _merged(raw: Mapping[str, Any], recipes: Mapping[str, Any], rid: str, seen: tuple[str, ...]
            ) -> dict[str, Any]:
    """A raw recipe table with its ``base`` merged in, section by section."""
    own = dict(raw)
    base = own.pop("base", None)
    if base is None:
        return own
    if not isinstance(base, str) or base not in recipes:
        raise InvalidInputError(f"recipe {rid!r}: base {base!r} is not a recipe of this file "
                                f"({', '.join(recipes)})")
    if base in seen:
        raise InvalidInputError(f"recipe {rid!r}: bases form a cycle ({' -> '.join(seen)})")
    merged = _merged(recipes[base], recipes, base, (*seen, base))
    merged.pop("rows", None)
    merged.pop("title", None)
    for key, value in own.items():
        if key in SECTIONS and isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def _under(defaults: Mapping[str, Any], recipe: Mapping[str, Any]) -> dict[str, Any]:
    """``recipe`` with the file's ``[defaults]`` sections beneath its own settings."""
    out = dict(recipe)
    for key, value in defaults.items():
        if key in SECTIONS and isinstance(value, Mapping):
            own = out.get(key)
            out[key] = {**value, **own} if isinstance(own, Mapping) else (
                dict(value) if own is None else own)
        else:
            out.setdefault(key, value)
    return out


def parse_recipe_file(text: str, file: str) -> RecipeFile:
    """Validate a recipe file's TOML text (``ConfigError`` naming ``file``, recipe and key).

    The file's ``[defaults]`` sections lie beneath every recipe, then a recipe's ``base``,
    then its own settings.
    """
    data = loads_toml(text, origin=file)
    defaults = data.pop("defaults", {})
    if not isinstance(defaults, Mapping) or set(defaults) - set(SECTIONS):
        raise ConfigError(f"{file}: [defaults] may hold only the sections {list(SECTIONS)}")
    raw = data.get("recipes")
    if isinstance(raw, Mapping):
        try:
            data["recipes"] = {rid: _under(defaults, _merged(r, raw, rid, (rid,)))
                               if isinstance(r, Mapping) else r for rid, r in raw.items()}
        except InvalidInputError as err:
            raise ConfigError(f"{file}: {err}") from None
    return parse(RecipeFile, data, file=file)


@cache
def _files() -> tuple[tuple[str, RecipeFile], ...]:
    folder = resources.files("oodbench.published").joinpath(*RECIPE_FOLDER.split("/"))
    out = []
    for path in sorted(folder.iterdir(), key=lambda p: p.name):
        if path.name.endswith(".toml"):
            out.append((f"{RECIPE_FOLDER}/{path.name}",
                        parse_recipe_file(path.read_text(encoding="utf-8"), str(path))))
    return tuple(out)


@cache
def recipes() -> dict[str, Recipe]:
    """Every recipe of every family file, by id (ids are unique across files)."""
    out: dict[str, Recipe] = {}
    for file, parsed in _files():
        for rid, entry in parsed.recipes.items():
            if rid in out:
                raise ConfigError(f"{file}: recipe {rid!r} is also in {out[rid].file}")
            out[rid] = Recipe(rid, parsed.family, file, parsed.paper, parsed.code, entry)
    return out


def recipe(rid: str) -> Recipe:
    """The recipe ``rid`` (``UnknownNameError`` with the closest ids)."""
    known = recipes()
    if rid not in known:
        raise UnknownNameError("recipe", rid, known)
    return known[rid]


def row_recipes(rows: pd.DataFrame) -> pd.Series:
    """The recipe id of each catalogue row (``""`` for a row without one); a row two recipes
    claim is a ``ConfigError`` naming both."""
    ids = pd.Series("", index=rows.index, dtype=object)
    for r in recipes().values():
        mask = pd.Series(False, index=rows.index)
        for sel in r.entry.rows:
            hit = pd.Series(True, index=rows.index)
            for key, value in sel.items():
                hit &= rows[key].astype(str) == value if key in rows.columns else False
            mask |= hit
        clash = mask & (ids != "")
        if clash.any():
            row = rows[clash].iloc[0]
            raise ConfigError(f"published row {row.get('table')} / {row.get('method')!r} "
                              f"({row.get('backbone')}, {row.get('tuning')}) is claimed by the "
                              f"recipes {ids[clash].iloc[0]!r} and {r.id!r}; narrow their row "
                              "selectors")
        ids[mask] = r.id
    return ids.astype(str)


def for_table(table: str, method: str | None = None) -> list[Recipe]:
    """The recipes of ``table``'s rows (of ``method``, as printed or a recipe id, if given)."""
    from oodbench.published.catalogue import load

    rows = load(table)
    ids = row_recipes(rows)
    if method is not None:
        by_method = ids[(rows["method"] == method) & (ids != "")]
        chosen = set(by_method) if len(by_method) else ({method} & set(ids))
        if not chosen:
            raise UnknownNameError(f"method or recipe of table {table!r}", method,
                                   set(rows["method"]) | (set(ids) - {""}))
        ids = ids[ids.isin(chosen)]
    return [recipe(r) for r in dict.fromkeys(i for i in ids if i)]


def coverage(table: str) -> tuple[int, int]:
    """``(rows with a recipe, rows)`` of one published table."""
    from oodbench.published.catalogue import load

    ids = row_recipes(load(table))
    return int((ids != "").sum()), len(ids)
