"""``oodbench.constraints``: each kind of declaration accepts exactly its values and describes
them in the words of the uniform error message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
import pytest

from oodbench.constraints import (
    AnyOf,
    Check,
    Declared,
    DeclaredFields,
    Flag,
    Integer,
    Interval,
    ListOf,
    Options,
    Text,
    declarations,
    field_error,
    undeclared,
    unknown_names,
    validate,
)
from oodbench.errors import InvalidInputError


@pytest.mark.parametrize("closed, inside, outside, text", [
    ("both", [0, 0.5, 1], [-0.1, 1.1], "in [0, 1]"),
    ("left", [0, 0.999], [1, -1e-9], "in [0, 1)"),
    ("right", [1e-9, 1], [0, 1.5], "in (0, 1]"),
    ("neither", [0.5], [0, 1], "in (0, 1)"),
])
def test_interval_ends_belong_to_it_as_closed_says(closed, inside, outside, text) -> None:
    interval = Interval(0, 1, closed)  # type: ignore[arg-type]
    assert interval.describe() == text
    assert all(interval.problem(v) is None for v in inside)
    assert all(interval.problem(v) == text for v in outside)


def test_one_sided_intervals_and_non_numbers() -> None:
    positive = Interval(0, None, "neither")
    assert positive.describe() == "> 0" and Interval(0, None).describe() == ">= 0"
    assert Interval(None, 1, "neither").describe() == "< 1"
    assert positive.problem(np.float32(2.0)) is None and positive.problem(3) is None
    # nan, inf and bools are no numbers of an interval, whatever its bounds
    for bad in (float("nan"), float("inf")):
        assert positive.problem(bad) == "> 0"
    assert positive.problem(True) == "a number" and positive.problem("1") == "a number"
    assert Interval().describe() == "a finite number"


def test_integer_refuses_fractions_and_bools_and_takes_numpy_integers() -> None:
    count = Integer(min=1)
    assert count.describe() == "an integer >= 1" and Integer(1, 5).describe() == "an integer in [1, 5]"
    assert count.problem(np.int64(3)) is None
    assert count.problem(1.0) == "an integer" and count.problem(True) == "an integer"
    assert count.problem(0) == "an integer >= 1"


def test_options_do_not_take_true_for_one() -> None:
    sign = Options(1, 0)
    assert sign.problem(1) is None and sign.problem(0) is None
    assert sign.problem(True) == "one of 1, 0" and sign.problem(2) == "one of 1, 0"
    assert Flag().problem(True) is None and Flag().problem(1) == "True or False"
    assert Text("a prompt").problem(3) == "a prompt"


@dataclass
class _Toy:
    rate: Annotated[float, Interval(0, 1, "left", note="a probability")] = 0.5
    count: Annotated[int | None, Integer(min=1)] = None
    low: Annotated[float, Interval()] = 0.0
    high: Annotated[float, Interval()] = 1.0
    plain: float = 2.0


ORDERED = Check(("low", "high"), lambda lo, hi: lo <= hi, "low <= high")


def test_declarations_are_read_from_the_annotations() -> None:
    found = declarations(_Toy)
    assert list(found) == ["rate", "count", "low", "high"]
    assert found["count"].optional and found["count"].describe() == "an integer >= 1, or None"
    assert found["rate"].default == 0.5 and found["rate"].type == "float"
    assert undeclared(_Toy) == ("plain",)


def test_validate_raises_one_uniform_line_per_kind() -> None:
    found = declarations(_Toy)
    cases = [
        ({"rate": 1.0}, r"^toy: rate must be in \[0, 1\) \(a probability\); got 1\.0$"),
        ({"count": 0}, r"^toy: count must be an integer >= 1; got 0$"),
        ({"count": 2.5}, r"^toy: count must be an integer; got 2\.5 \(float\); write it without "
                         r"a decimal point, e\.g\. count=2$"),
        ({"low": 2.0, "high": 1.0}, r"^toy: needs low <= high; got low=2\.0, high=1\.0$"),
    ]
    for values, message in cases:
        with pytest.raises(InvalidInputError, match=message):
            validate("toy", found, (ORDERED,), {**_Toy().__dict__, **values})
    validate("toy", found, (ORDERED,), {**_Toy().__dict__, "count": None})  # None: optional
    assert field_error("toy", "rate", 0.0, found["rate"]) is None


def test_unknown_names_suggest_the_closest() -> None:
    assert unknown_names("detector 'x'", ["k"], ["k", "seed"]) is None
    assert unknown_names("detector 'x'", ["sed"], ["k", "seed"]) == (
        "detector 'x' has no hyper-parameter sed; it takes k, seed; did you mean 'seed'?")
    assert unknown_names("detector 'x'", ["zzz"], []) == (
        "detector 'x' has no hyper-parameter zzz; it takes none")


def test_a_noun_names_what_the_unknown_names_are() -> None:
    assert unknown_names("loss 'ce'", ["smothing"], ["smoothing"], noun="option") == (
        "loss 'ce' has no option smothing; it takes smoothing; did you mean 'smoothing'?")


def test_a_list_may_be_empty_and_increasing() -> None:
    steps = ListOf(Integer(min=1), min_items=0, increasing=True)
    assert steps.describe() == "a list, each an integer >= 1, increasing"
    assert steps.problem([]) is None and steps.problem((2, 5)) is None
    for bad in ([5, 2], [2, 2], [0, 3], [1.5], "12", 3):  # order, repeat, range, type, not a list
        assert steps.problem(bad) == steps.describe()


def test_any_of_takes_what_one_of_its_constraints_takes() -> None:
    level = AnyOf(Interval(0, None), Options("estimate"))
    assert level.describe() == ">= 0 or 'estimate'"
    assert level.problem(0.3) is None and level.problem("estimate") is None
    assert level.problem(-1.0) == level.describe() and level.problem("auto") == level.describe()


def test_text_with_a_test_says_what_it_asks() -> None:
    template = Text("a string with one '{}'", test=lambda text: text.count("{}") == 1)
    assert template.problem("a photo of a {}") is None
    assert template.problem("a photo") == template.problem(3) == "a string with one '{}'"


@dataclass(frozen=True)
class _Declaring(DeclaredFields):
    low: Annotated[float, Interval()] = 0.0
    high: Annotated[float, Interval()] = 1.0
    steps: Annotated[tuple[int, ...], ListOf(Integer(min=1), min_items=0)] = ()
    checks = (ORDERED,)

    def _settle(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))


def test_declared_fields_are_validated_on_creation_then_settled() -> None:
    with pytest.raises(InvalidInputError, match=r"^_Declaring: needs low <= high; got low=2, high=1$"):
        _Declaring(low=2, high=1)
    with pytest.raises(InvalidInputError, match=r"^_Declaring: steps must be a list, each an integer >= 1; got \[0\]$"):
        _Declaring(steps=[0])  # type: ignore[arg-type]
    assert _Declaring(steps=[1, 3]).steps == (1, 3)  # type: ignore[arg-type]


def test_list_constraints_check_every_item_and_the_size() -> None:
    grid = ListOf(Integer(min=1))
    assert grid.describe() == "a non-empty list, each an integer >= 1"
    assert grid.problem([1, 3]) is None and grid.problem((2,)) is None
    for bad in ([], "12", [1, 0], [1, 2.5], 3):
        assert grid.problem(bad) == grid.describe(), bad
    rgb = ListOf(Interval(0, None, "neither"), size=3)
    assert rgb.describe() == "a list of 3, each > 0"
    assert rgb.problem([0.2, 0.2, 0.2]) is None and rgb.problem([0.2, 0.2]) == rgb.describe()


def test_a_misspelt_option_gets_the_closest_one() -> None:
    declared = Declared("mode", Options("head", "full"), "str", False, "head")
    error = field_error("toy", "mode", "heads", declared)
    assert str(error) == "toy: mode must be one of 'head', 'full'; got 'heads'; did you mean 'head'?"
    assert str(field_error("toy", "mode", "zzz", declared)) == (
        "toy: mode must be one of 'head', 'full'; got 'zzz'")
