"""Detector hyper-parameters are declared as data (``oodbench.constraints``): every field of
every registered detector is declared, a bad value is refused by ``create`` in one uniform line
before any work, and the listing, the documentation table and the search-space bounds are
derived from the same declarations."""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from oodbench import detectors
from oodbench.cli.main import main
from oodbench.constraints import Flag, Interval, Options, undeclared
from oodbench.detectors._doc_table import markdown
from oodbench.detectors.base import _REGISTRY, Detector, declared_hyperparameters, register
from oodbench.errors import InvalidInputError
from oodbench.tuning.space import Range, check_bounds
from tests.conftest import REPO

#: the uniform message of a bad value: detector, hyper-parameter, valid values, value
UNIFORM = re.compile(r"^detector '\w+': (\w+ must be .+|needs .+); got .+$")


def test_every_registered_detector_declares_every_hyper_parameter() -> None:
    """Fails when a detector adds a field without a declaration (``Annotated[...]``)."""
    missing = {name: undeclared(cls) for name, cls in _REGISTRY.items() if undeclared(cls)}
    assert missing == {}


def test_declarations_agree_with_the_field_types() -> None:
    """An ``int`` field declares integers, a ``float`` one a non-integer interval, a ``bool`` one
    a flag: a declaration cannot widen what the type says."""
    for name, cls in _REGISTRY.items():
        for field, d in declared_hyperparameters(cls).items():
            kind = d.type.removesuffix(" | None")
            if kind == "int":
                assert (isinstance(d.constraint, Interval) and d.constraint.integer) or isinstance(
                    d.constraint, Options), (name, field)
            elif kind == "float":
                assert isinstance(d.constraint, Interval) and not d.constraint.integer, (name, field)
            elif kind == "bool":
                assert isinstance(d.constraint, Flag), (name, field)


def test_a_detector_with_an_undeclared_field_is_not_registered() -> None:
    @dataclass
    class Toy(Detector):
        name = "toy_undeclared_field"
        width: float = 1.0

        def _score(self, acts):  # pragma: no cover - never scored
            raise AssertionError

    assert undeclared(Toy) == ("width",)
    with pytest.raises(TypeError, match=r"Toy: width declare no valid values; annotate"):
        register(Toy)
    assert "toy_undeclared_field" not in _REGISTRY


@pytest.mark.parametrize("name, values, message", [
    # an open interval: 0 is out
    ("energy", {"temperature": 0.0}, r"temperature must be > 0; got 0\.0"),
    # a closed interval: 100 is in for ReAct, out of ASH's half-open [0, 100)
    ("ash_p", {"percentile": 100.0}, r"percentile must be in \[0, 100\) \(a percentile, in percent\); got 100\.0"),
    ("react", {"percentile": 100.5}, r"percentile must be in \[0, 100\] \(a percentile, in percent\); got 100\.5"),
    # options
    ("odin", {"gradient": "softmax"}, r"gradient must be one of 'logits', 'probabilities' \(.*\); got 'softmax'"),
    # integers: the type, then the range
    ("knn", {"k": 0}, r"k must be an integer >= 1 \(a number of nearest neighbours\); got 0"),
    ("gen", {"M": 2.0}, r"M must be an integer; got 2\.0 \(float\)"),
    # a check between hyper-parameters
    ("vra", {"lower_percentile": 95.0}, r"needs lower_percentile <= upper_percentile; got "
                                        r"lower_percentile=95\.0, upper_percentile=90\.0"),
    # checked when created, not when fitted (NegLabel checked these in fit before)
    ("neglabel", {"neg_fraction": 0.0}, r"neg_fraction must be in \(0, 1\]"),
])
def test_a_bad_value_is_refused_in_one_uniform_line_before_any_work(name, values, message) -> None:
    """``create`` refuses it: no data, model or fit is involved."""
    with pytest.raises(InvalidInputError, match=message) as err:
        detectors.create(name, **values)
    text = str(err.value)
    assert UNIFORM.match(text) and f"detector {name!r}" in text and "\n" not in text
    detectors.create(name)  # the defaults are valid


def test_the_range_is_enforced_at_its_ends() -> None:
    """The declared ends themselves: the boundary values of each kind are accepted."""
    assert detectors.create("react", percentile=100).percentile == 100
    assert detectors.create("ash_p", percentile=0).percentile == 0
    assert detectors.create("knn", k=1).k == 1
    assert detectors.create("vra", lower_percentile=90.0, upper_percentile=90.0).hyperparams[
        "lower_percentile"] == 90.0


def test_an_unknown_hyper_parameter_gets_the_closest_names() -> None:
    with pytest.raises(InvalidInputError, match=r"^detector 'energy' has no hyper-parameter "
                       r"temprature; it takes fit_data, temperature; did you mean 'temperature'\?$"):
        detectors.create("energy", temprature=2.0)


def _listed(row: str) -> tuple[str, str]:
    return row.split("\t")[0], row.split("\t")[4]


def test_the_listing_shows_the_declared_valid_values() -> None:
    result = CliRunner().invoke(main, ["list", "detectors", "--format", "tsv"])
    assert result.exit_code == 0, result.output
    header, *rows = result.output.strip().splitlines()
    assert header.split("\t")[4] == "valid values"
    listed = dict(_listed(r) for r in rows)
    assert set(listed) == set(_REGISTRY)
    for name, cls in _REGISTRY.items():
        expected = [f"{f}: {d.describe()}" for f, d in declared_hyperparameters(cls).items()]
        assert listed[name] == "; ".join(expected + [c.requirement for c in cls.checks])
    assert listed["energy"] == "temperature: > 0"
    assert listed["vra"].endswith("; lower_percentile <= upper_percentile")


def test_the_documentation_table_is_generated_from_the_declarations() -> None:
    """``docs/detectors.md`` is ``markdown()``: rerun ``scripts/make_detector_docs.py`` after
    changing a declaration."""
    text = (REPO / "docs" / "detectors.md").read_text(encoding="utf-8")
    assert text == markdown(), "docs/detectors.md is out of date: run scripts/make_detector_docs.py"
    assert "| energy | `temperature` | float | `1.0` | > 0 |  |" in text
    for name in _REGISTRY:
        assert f"\n| {name} | " in text


def test_search_space_bounds_are_checked_against_the_declarations() -> None:
    """One detector is built for the base values; the bounds are read off the declarations,
    not found by building detectors over every combination of the other bounds."""
    built: list[dict] = []

    def build(point):
        built.append(dict(point))
        return detectors.create("vra", **point)

    space = {"lower_percentile": Range(50.0, 95.0), "upper_percentile": [90.0, 99.0],
             "gamma": [0.0, 0.5, 1.0]}
    check_bounds(build, space)  # 95 is valid with upper_percentile 99, a bound of its range
    assert built == [{}]
    with pytest.raises(InvalidInputError, match=r"space\['upper_percentile'\] value 101\.0 is "
                       r"outside the valid range: detector 'vra': upper_percentile must be in "
                       r"\[0, 100\]"):
        check_bounds(build, {**space, "upper_percentile": [90.0, 101.0]})
    with pytest.raises(InvalidInputError, match=r"space\['lower_percentile'\] bound 95\.0 is "
                       r"outside the valid range: detector 'vra': needs lower_percentile <= "
                       r"upper_percentile"):
        check_bounds(build, {"lower_percentile": Range(50.0, 95.0), "upper_percentile": [80.0, 90.0]})
    with pytest.raises(InvalidInputError, match=r"space\['k'\] value 1\.5 .*k must be an integer"):
        check_bounds(lambda p: detectors.create("knn", **p), {"k": [5, 1.5]})


def test_integer_fields_come_from_the_declarations() -> None:
    from oodbench.detectors.base import integer_fields

    hints = typing.get_type_hints(detectors.detector_class("knn"))
    assert integer_fields(detectors.detector_class("knn")) == ("k", "seed")
    assert hints["k"] is int
