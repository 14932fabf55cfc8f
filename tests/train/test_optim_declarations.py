"""``OptimSettings`` declares its fields' valid values and the rules between them once, as
data; the ``[train]`` table of a training config takes those fields without declaring them a
second time (``TrainSettings`` derives them)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import asdict, dataclass, replace
from typing import Annotated

import pytest

from oodbench.constraints import Integer, Interval, ListOf, Options, declarations, undeclared
from oodbench.errors import InvalidInputError
from oodbench.train.config import TrainSettings, optional_keys
from oodbench.train.optim import FIELDS, FINETUNE, OptimSettings

#: two valid settings that, between them, change every field from its default (checked below)
STEP = OptimSettings(epochs=7, batch_size=3, lr=0.2, weight_decay=0.0, schedule="step",
                     warmup_epochs=1, milestones=(2, 5), step_factor=0.5, nesterov=True)
ADAMW = OptimSettings(optimizer="adamw", warmup_fraction=0.2, min_lr=0.01)


def test_every_field_declares_its_valid_values() -> None:
    assert undeclared(OptimSettings) == ()
    assert list(declarations(OptimSettings)) == list(FIELDS)


def test_no_field_is_declared_both_in_optim_settings_and_in_the_train_table() -> None:
    own = set(TrainSettings.__dict__["__annotations__"])  # what the [train] class itself declares
    assert own and not own & set(FIELDS)
    assert set(FIELDS) <= set(TrainSettings.model_fields)


def test_the_train_table_accepts_every_optim_settings_field() -> None:
    changed = {f for s in (STEP, ADAMW) for f in FIELDS if getattr(s, f) != getattr(FINETUNE, f)}
    assert changed == set(FIELDS)  # the two settings exercise every field
    for settings in (STEP, ADAMW):
        table = {**asdict(settings), "milestones": list(settings.milestones)}  # as TOML gives it
        assert TrainSettings(loss="ce", **table).optim() == settings


def test_a_field_added_to_a_settings_type_is_a_key_of_its_table() -> None:
    """``optional_keys`` reads the dataclass: a new field is a key, typed from its declaration."""

    @dataclass(frozen=True)
    class Settings:
        rounds: Annotated[int, Integer(min=1)] = 1
        mode: Annotated[str, Options("fast", "exact")] = "fast"
        steps: Annotated[tuple[int, ...], ListOf(Integer(min=1), min_items=0)] = ()

    table = optional_keys(Settings, "SettingsKeys")
    assert set(table.model_fields) == {f.name for f in dataclasses.fields(Settings)}
    assert table().model_dump() == {"rounds": None, "mode": None, "steps": None}
    assert table(rounds=3, mode="exact", steps=[1, 2]).model_dump() == {
        "rounds": 3, "mode": "exact", "steps": [1, 2]}
    for bad in ({"rounds": 2.5}, {"mode": "slow"}, {"steps": ["a"]}):
        with pytest.raises(ValueError):
            table(**bad)


def _out_of_range() -> list[tuple[str, float]]:
    """(field, a value just outside its interval) for every field declared by an interval with a
    lower bound, derived from the declaration."""
    return [(name, d.constraint.low - (1 if d.constraint.integer else 0.5))
            for name, d in declarations(OptimSettings).items()
            if isinstance(d.constraint, Interval) and d.constraint.low is not None]


@pytest.mark.parametrize(("field", "value"), _out_of_range())
def test_a_value_out_of_range_gets_the_uniform_message(field, value) -> None:
    described = declarations(OptimSettings)[field].describe()
    with pytest.raises(InvalidInputError) as err:
        replace(FINETUNE, **{field: value})
    assert re.fullmatch(rf"optimiser settings: {field} must be {re.escape(described)}( \(.*\))?; "
                        rf"got {re.escape(repr(value))}", str(err.value)), str(err.value)


@pytest.mark.parametrize(("changes", "names"), [
    ({"epochs": 3, "warmup_epochs": 3}, "warmup_epochs=3, epochs=3"),
    ({"warmup_epochs": 1, "warmup_fraction": 0.1}, "warmup_epochs=1, warmup_fraction=0.1"),
    ({"epochs": 5, "schedule": "step", "milestones": (5,)}, "milestones=(5,), epochs=5"),
    ({"schedule": "step"}, "schedule='step', milestones=()"),
    ({"milestones": (2,)}, "schedule='cosine', milestones=(2,)"),
])
def test_a_rule_between_fields_names_their_values(changes, names) -> None:
    with pytest.raises(InvalidInputError, match=rf"^optimiser settings: needs .*; got "
                                                rf"{re.escape(names)}$"):
        replace(FINETUNE, **changes)
