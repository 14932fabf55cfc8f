"""oodbench.schema: the one configuration mechanism (pydantic) and its error messages."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field, StrictInt, ValidationInfo, model_validator

from oodbench.errors import ConfigError, MissingDataError
from oodbench.schema import At, ConfigPath, NonEmptyArray, Schema, parse, read_toml, where


class Entry(Schema):
    shorthand = "name"

    name: str = Field(description="what the entry is called")
    size: StrictInt = 1
    files: tuple[ConfigPath, ...] = ()
    grid: dict[str, NonEmptyArray] = Field(default_factory=dict)


class Section(Schema):
    depth: StrictInt = 3

    @classmethod
    def prepare(cls, data: dict, info: ValidationInfo) -> dict:
        data.setdefault("depth", (info.context or {}).get("default_depth", 3))
        return data


class File(Schema):
    section: Section = Field(default_factory=dict, validate_default=True)
    models: tuple[Entry, ...] = ()

    @model_validator(mode="after")
    def _cross(self) -> File:
        if self.section.depth == 99 and not self.models:
            raise At("[section]", "depth 99 needs a [[models]] entry")
        return self


def check(data, message, **kwargs):
    with pytest.raises(ConfigError) as info:
        parse(File, data, file="f.toml", **kwargs)
    assert message in str(info.value), str(info.value)
    return str(info.value)


def test_locations_are_written_the_toml_way():
    assert where(()) == "top level"
    assert where(("section", "depth")) == "[section].depth"
    assert where(("models", 1, "grid", "k")) == "[[models]] #2.grid.k"
    assert where(("benchmarks", 0, "type=cood", "pool")) == "[[benchmarks]] #1.pool"
    assert where(("models",)) == "[[models]]"
    assert where(("detectors", "knn", "paper")) == "[detectors].knn.paper"  # presets.toml: a table


def test_valid_file_with_shorthand_context_and_relative_paths(tmp_path):
    value = parse(File, {"models": ["a", {"name": "b", "files": ["x.txt", "/abs/y"]}]},
                  file="f.toml", context={"base_dir": tmp_path, "default_depth": 7})
    assert value.section.depth == 7
    assert [m.name for m in value.models] == ["a", "b"]
    assert value.models[1].files == ((tmp_path / "x.txt").resolve(), Path("/abs/y"))


def test_unknown_key_suggests_the_closest():
    check({"section": {"dept": 1}}, "f.toml: [section]: unknown key 'dept'; did you mean 'depth'? "
          "valid keys: depth")
    check({"sectoin": {}}, "f.toml: top level: unknown key 'sectoin'; did you mean 'section'?")


def test_missing_required_key_names_what_it_is():
    check({"models": [{"size": 2}]}, "[[models]] #1: missing required key 'name' (what the entry is called)")


def test_type_errors_and_non_tables():
    check({"section": {"depth": "3"}}, "[section].depth: expected int, got '3'")
    check({"section": {"depth": True}}, "[section].depth: expected int, got True")
    check({"models": [{"name": "a", "grid": {"k": 5}}]}, "[[models]] #1.grid.k: expected a non-empty array, got 5")
    check({"models": [{"name": "a", "grid": {"k": []}}]}, "expected a non-empty array, got []")
    check({"section": 3}, "[section]: expected a table ({ key = value }), got 3")


def test_every_problem_is_reported_on_its_own_line():
    text = check({"section": {"depth": "x"}, "models": [{"name": "a", "size": "big"}]}, "expected int")
    lines = text.splitlines()
    assert lines == ["f.toml: [section].depth: expected int, got 'x'",
                     "f.toml: [[models]] #1.size: expected int, got 'big'"]


def test_a_validator_can_name_the_location():
    check({"section": {"depth": 99}}, "f.toml: [section]: depth 99 needs a [[models]] entry")


def test_the_error_class_is_the_callers():
    class MyError(ConfigError):
        pass

    with pytest.raises(MyError):
        parse(File, {"section": {"depth": "x"}}, file="f.toml", error=MyError)


def test_read_toml(tmp_path):
    good = tmp_path / "a.toml"
    good.write_text("[section]\ndepth = 4\n")
    data, text = read_toml(good, what="config")
    assert data == {"section": {"depth": 4}} and text.startswith("[section]")
    with pytest.raises(MissingDataError, match=r"config .*none.toml does not exist; pass the path "
                       r"of a TOML config \(see ex.toml\)"):
        read_toml(tmp_path / "none.toml", what="config", example="ex.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[section\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        read_toml(bad, what="config")
