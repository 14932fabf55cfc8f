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


def test_list_counts_the_rows_with_a_recipe() -> None:
    from oodbench.published.recipes import row_recipes

    result = _invoke("published", "list", "--format", "json")
    assert result.exit_code == 0, result.output
    shown = {r["table"]: r["with recipe"] for r in json.loads(result.output)}
    for name in published.tables():
        ids = row_recipes(published.load(name))
        assert shown[name] == f"{int((ids != '').sum()):,} of {len(ids):,}"
    assert shown["imagenet1k-vs-sun"] == "39 of 39"


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
    assert shown["timm:resnet50.tv_in1k"]["comparison"] == "same settings"
    assert shown["efficientnet_lite0"]["published"] == ""
    assert shown["efficientnet_lite0"]["comparison"].startswith("not comparable: backbone")
    table = _invoke("published", "compare", str(folder))
    assert table.exit_code == 0 and ("1 of 2 rows match; 1 has a near-match; 0 have no "
                                     "published counterpart") in table.output


def test_compare_without_matching_rows_or_results_is_a_one_line_error(tmp_path) -> None:
    from tests.published.test_compare import _row

    folder = _results_folder(tmp_path, [_row(group="letters")])
    result = _invoke("published", "compare", str(folder))
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert "nothing to compare" in result.output and "react on letters" in result.output
    missing = _invoke("published", "compare", str(tmp_path / "nowhere"))
    assert missing.exit_code == 2 and "has no results: pass the output folder" in missing.output


def test_show_printed_without_a_printed_form_is_refused_naming_those_with_one(monkeypatch) -> None:
    from tests.published.test_catalogue import _without_printed_form

    keep = _without_printed_form(monkeypatch, "cood")
    result = _invoke("published", "show", "cood", "--printed")
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "'cood' has no printed form" in result.output
    assert result.output.rstrip().endswith("the tables that have one: " + ", ".join(keep))


def test_show_printed_cood_is_the_official_file_line_for_line() -> None:
    """``--printed`` on the C-OOD table prints the official file's own lines; with ``--method``
    those of one confidence function, e.g. ViT-L/32-384's softmax line at severity 10."""
    from oodbench.published import cood

    lines = cood.bundled_bytes().decode("utf-8").splitlines()
    softmax = [lines[0], *(line for line in lines[1:]
                           if line.split(",")[8] == "softmax")]
    result = _invoke("published", "show", "cood", "--printed", "--method", "softmax",
                     "--format", "csv")
    assert result.exit_code == 0, result.output[-500:]
    assert result.stdout.splitlines() == softmax
    example = [line for line in softmax if line.startswith("10,")
               and ",vit_large_patch32_384,softmax," in line]
    assert len(example) == 1 and example[0] in result.output


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_show_printed_of_one_method_without_a_method_column(fmt: str) -> None:
    """OpenOOD's full-spectrum table has no method column (its key is Training, Postprocessor):
    --method picks the rows of that method instead of failing with a traceback."""
    import io

    import pandas as pd

    name = "openood-v1.5-imagenet1k-fsood"
    result = _invoke("published", "show", name, "--printed", "--method", "MSP", "--format", fmt)
    assert result.exit_code == 0, result.output
    shown = pd.read_csv(io.StringIO(result.stdout), sep="," if fmt == "csv" else "\t",
                        dtype=str, keep_default_na=False)
    pd.testing.assert_frame_equal(shown, published.printed(name, method="MSP"))
    assert set(shown["Postprocessor"]) == {"MSP"}
    unknown = _invoke("published", "show", name, "--printed", "--method", "MSPP")
    assert unknown.exit_code == 2 and "Did you mean 'MSP'" in unknown.output
