"""``oodbench published list | show | compare``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from oodbench import published
from oodbench.cli.main import main
from tests.conftest import shared_path
from tests.published.test_catalogue import LEADERBOARDS


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args), terminal_width=200)


def test_list_names_every_table() -> None:
    result = _invoke("published", "list")
    assert result.exit_code == 0, result.output
    for name in published.tables():
        assert name in result.output


@pytest.mark.parametrize("name", list(LEADERBOARDS))
def test_show_printed_csv_is_the_shared_file(name: str) -> None:
    source = shared_path("leaderboards", LEADERBOARDS[name]).read_bytes().decode("utf-8")
    result = _invoke("published", "show", name, "--printed", "--format", "csv")
    assert result.exit_code == 0, result.output
    assert result.output == source.replace("\r\n", "\n")


@pytest.mark.parametrize("name", [n for n in published.tables() if n != "cood"])
def test_show_prints_every_bundled_value_as_published(name: str) -> None:
    result = _invoke("published", "show", name, "--format", "json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    rows = published.load(name)
    assert [r["value"] for r in shown] == rows["value"].tolist()
    assert [r["method"] for r in shown] == rows["method"].tolist()


def test_show_one_method_in_the_terminal() -> None:
    result = _invoke("published", "show", "imagenet1k-vs-sun", "--method", "KNN (ResNet-50)")
    assert result.exit_code == 0, result.output
    assert "80.10" in result.output and "69.53" in result.output
    assert "88.40" not in result.output  # KNN (ResNet-50 SupCon) is another row


@pytest.mark.parametrize(("args", "expected"), [
    (("show", "imagenet1k-vs-sum"), "Did you mean 'imagenet1k-vs-sun'"),
    (("show", "imagenet1k-vs-sun", "--method", "ReAct (ResNet50)"),
     "Did you mean 'ReAct (ResNet-50)'"),
])
def test_bad_names_are_one_line_errors_with_exit_code_2(args: tuple[str, ...],
                                                         expected: str) -> None:
    result = _invoke("published", *args)
    assert result.exit_code == 2
    assert expected in result.output and result.output.count("\n") == 1
