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


def _results_folder(tmp_path, rows):
    import pandas as pd

    from oodbench.results.table import ResultsTable

    table = ResultsTable(tmp_path / "results")
    frame = pd.DataFrame(rows)
    table.append(frame.assign(cell=[f"c{i}" for i in range(len(frame))],
                              time="2026-01-01T00:00:00"))
    return tmp_path / "results"


def test_compare_prints_matches_and_what_differs(tmp_path) -> None:
    from tests.published.test_compare import _row

    folder = _results_folder(tmp_path, [_row(), _row(model="efficientnet_lite0", n_id=300)])
    result = _invoke("published", "compare", str(folder), "--table", "imagenet1k-vs-sun",
                     "--format", "json")
    assert result.exit_code == 0, result.output
    shown = {r["model"]: r for r in json.loads(result.output)}
    assert shown["timm:resnet50.tv_in1k"]["published"] == "88.16"
    assert shown["timm:resnet50.tv_in1k"]["comparison"] == "comparable"
    assert shown["efficientnet_lite0"]["published"] == ""
    assert shown["efficientnet_lite0"]["comparison"].startswith("not comparable: backbone")
    table = _invoke("published", "compare", str(folder))
    assert table.exit_code == 0 and "1 of 2 rows match a published row" in table.output


def test_compare_without_matching_rows_or_results_is_a_one_line_error(tmp_path) -> None:
    from tests.published.test_compare import _row

    folder = _results_folder(tmp_path, [_row(group="letters")])
    result = _invoke("published", "compare", str(folder))
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert "nothing to compare" in result.output and "react on letters" in result.output
    missing = _invoke("published", "compare", str(tmp_path / "nowhere"))
    assert missing.exit_code == 2 and "has no results: pass the output folder" in missing.output
