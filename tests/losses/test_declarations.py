"""Every loss declares its options as data (``oodbench.constraints``): a value outside its
declaration fails on creation with the uniform one-line message, an unknown option gets the
closest ones, and ``oodbench list losses`` shows the valid values from the declarations."""

from __future__ import annotations

import dataclasses
import operator
import re
from typing import Annotated

import pytest
from click.testing import CliRunner

from oodbench.cli.main import main
from oodbench.constraints import Check, Integer, Interval, declarations, undeclared
from oodbench.errors import InvalidInputError
from oodbench.losses import available, create
from oodbench.losses.base import LOSSES, Loss, option_names


def _out_of_range() -> list[tuple[str, str, float]]:
    """(loss, option, a value just outside the option's interval) for every option declared by
    an interval with a bound, the value derived from the declaration."""
    cases = []
    for name, cls in sorted(LOSSES.items()):
        for option, declared in declarations(cls).items():
            interval = declared.constraint
            if not isinstance(interval, Interval) or interval.low is None:
                continue
            below = interval.low - 1 if interval.integer else interval.low - 0.5
            cases.append((name, option, below))
    return cases


def test_every_loss_declares_every_option() -> None:
    for name, cls in LOSSES.items():
        assert undeclared(cls) == (), name
        assert set(declarations(cls)) == set(option_names(cls)), name


@pytest.mark.parametrize(("name", "option", "value"), _out_of_range())
def test_an_option_out_of_range_fails_on_creation_with_the_uniform_message(name, option, value):
    described = declarations(LOSSES[name])[option].describe()
    with pytest.raises(InvalidInputError) as err:
        create(name, **({"groups": [[0]]} if name == "mos" else {}), **{option: value})
    # loss, option, valid values (as the declaration words them), value; on one line
    assert re.fullmatch(rf"loss '{name}': {option} must be {re.escape(described)}( \(.*\))?; "
                        rf"got {re.escape(repr(value))}", str(err.value)), str(err.value)


def test_an_out_of_range_option_stops_a_training_run_before_it_trains(tmp_path) -> None:
    """``oodbench.train.train`` refuses it before it reads the model or the data (both ``None``
    here: touching either would be an AttributeError) or writes anything."""
    from oodbench.train import train

    with pytest.raises(InvalidInputError, match=r"^loss 'logitnorm': tau must be > 0; got -1\.0$"):
        train(None, None, out=tmp_path / "run", loss="logitnorm",  # type: ignore[arg-type]
              loss_options={"tau": -1.0})
    assert not (tmp_path / "run").exists()


def test_an_unknown_option_gets_the_closest_ones() -> None:
    with pytest.raises(InvalidInputError, match=(
            r"^loss 'npos' has no option queue; it takes .*queue_size.*; did you mean "
            r"'queue_size'\?$")):
        create("npos", queue=10)


def test_a_check_between_options_names_both_values() -> None:
    with pytest.raises(InvalidInputError,
                       match=r"^loss 'npos': needs keep <= samples; got keep=5, samples=4$"):
        create("npos", samples=4, keep=5)


def test_numbers_are_held_as_their_declared_type() -> None:
    """``weight=1`` runs (and is recorded) as ``1.0``, as the hand-written checks did."""
    assert create("oe", weight=1).hyperparams == {"weight": 1.0}
    assert type(create("oe", weight=1).weight) is float
    assert type(create("mm", p=2.0).p) is int


def test_a_loss_is_a_hashable_module_whose_options_are_dataclass_fields() -> None:
    loss = create("npos")
    assert dataclasses.is_dataclass(loss) and hash(loss) == hash(loss)
    assert dict(loss.named_modules())["logitnorm"].tau == loss.tau  # a sub-module registers


class ToyWidthLoss(Loss):
    """A toy: the mean logit times a width."""

    name = "toy_width_loss"
    width: Annotated[float, Interval(0, 2, "right")] = 1.0
    copies: Annotated[int, Integer(min=1)] = 1
    checks = (Check(("copies", "width"), operator.le, "copies <= width"),)

    def _loss(self, logits, labels, outlier_logits):  # type: ignore[no-untyped-def]
        return self.width * logits.mean()


def test_the_listing_shows_a_new_losss_options_from_its_declarations() -> None:
    """A new loss, declared in this file only: ``oodbench list losses`` shows each option with
    its valid values and the check between them, read from the declarations."""
    LOSSES.add(ToyWidthLoss)
    try:
        row = next(r for r in available() if r["name"] == "toy_width_loss")
        assert row["ranges"] == {"width": "in (0, 2]", "copies": "an integer >= 1"}
        assert row["checks"] == ["copies <= width"]
        result = CliRunner().invoke(main, ["list", "losses"])  # piped: one row a line
        assert result.exit_code == 0, result.output
        line = next(x for x in result.output.splitlines() if x.startswith("toy_width_loss"))
        assert "width: in (0, 2]; copies: an integer >= 1; copies <= width" in line
        assert "width=1.0, copies=1" in line
        with pytest.raises(InvalidInputError, match=r"^loss 'toy_width_loss': width must be "):
            create("toy_width_loss", width=3.0)
    finally:
        del LOSSES["toy_width_loss"]


def test_a_loss_with_an_undeclared_option_is_refused_on_registration() -> None:
    class Undeclared(Loss):
        name = "undeclared_loss"
        width: float = 1.0

        def _loss(self, logits, labels, outlier_logits):  # type: ignore[no-untyped-def]
            return logits.mean()

    with pytest.raises(TypeError, match="width declare no valid values"):
        LOSSES.add(Undeclared)
    assert "undeclared_loss" not in LOSSES


def test_an_unhashable_loss_is_refused_on_registration() -> None:
    """An explicit ``@dataclass`` (``eq=True``) would drop ``__hash__``: torch keeps modules in
    sets (``named_modules``), so the registry refuses it and says what to do."""

    @dataclasses.dataclass
    class Unhashable(Loss):
        name = "unhashable_loss"

        def _loss(self, logits, labels, outlier_logits):  # type: ignore[no-untyped-def]
            return logits.mean()

    with pytest.raises(TypeError, match="leave the decorator out"):
        LOSSES.add(Unhashable)
    assert "unhashable_loss" not in LOSSES
