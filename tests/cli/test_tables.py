"""Every table command at 80 columns on a terminal, and piped (issue 33: a terminal that reads
well). Rendered in-process with click's CliRunner: as an 80-column terminal through rich's own
switches (``TTY_COMPATIBLE=1 COLUMNS=80``; ``TERM=dumb``: no colour codes), piped without them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from rich.cells import cell_len

from oodbench.cli.listing import REGISTRIES
from oodbench.cli.main import main
from oodbench.cli.tables import cell_text, fit

REPO = Path(__file__).resolve().parents[2]
#: an 80-column terminal as rich sees it (see oodbench.cli.tables)
TERMINAL_80 = {"TTY_COMPATIBLE": "1", "COLUMNS": "80", "TERM": "dumb", "FORCE_COLOR": None}
#: a pipe: neither of rich's switches, whatever the environment running the tests sets
PIPED = {"TTY_COMPATIBLE": None, "FORCE_COLOR": None}
BOX = re.compile("[\u2500-\u257f]")  # rich's box drawing
CELL_SEPARATORS = re.compile("[│┃]")


@dataclass
class World:
    """What the commands read: an activation cache of one entry, an `oodbench run` folder
    compared with the published ReAct rows, one with C-OOD levels."""

    cache: Path
    key: str
    compared: Path
    cood: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    from oodbench.extract import extract
    from oodbench.results.table import ResultsTable, from_wide, with_text
    from tests.extract._toy import RandomImages, TinyNet
    from tests.published.test_compare import _row

    root = tmp_path_factory.mktemp("tables")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OODBENCH_CACHE", str(root / "cache"))
        key = extract(TinyNet(), RandomImages(5, name="fives"), progress=False).meta["cache_key"]
    rows = pd.DataFrame([_row(), _row(metric="fpr95_id", value=0.4769),
                         _row(model="efficientnet_lite0", n_id=300)])
    ResultsTable(root / "compared").append(rows.assign(cell=[f"c{i}" for i in range(len(rows))],
                                                       time="2026-01-01T00:00:00"))
    wide = pd.DataFrame({"detector": ["msp", "msp"], "hyperparams": ["{}", "{}"],
                         "group": ["level_0", "level_10"], "level": [0, 10],
                         "auroc": [0.95, 0.70], "n_id": [50_000] * 2, "n_ood": [5, 5],
                         "n_classes": [1000] * 2, "n_levels": [11] * 2})
    (root / "cood").mkdir()
    with_text(from_wide(wide, model="m", benchmark="cood", cell="c", seconds=1.0,
                        time="t")).to_parquet(root / "cood" / "results.parquet")
    return World(root / "cache", key, root / "compared", root / "cood")


@dataclass
class Case:
    """A command and the key cells of its rows (each row's cells, in order, on one line)."""

    args: list[str]
    rows: list[list[str]]


def _registry(module: str) -> Callable[[World], Case]:
    def case(_: World) -> Case:
        import importlib

        names = [r["name"] for r in importlib.import_module(f"oodbench.{module}").available()]
        return Case(["list", module], [[n] for n in names])
    return case


def _models(_: World) -> Case:
    from oodbench.models import FAMILIES

    return Case(["list", "models"], [[f.syntax] for f in FAMILIES.values()])


def _benchmarks(_: World) -> Case:
    from oodbench import benchmarks

    return Case(["list", "benchmarks"], [[n] for n in benchmarks.available()])


def _datasets(_: World) -> Case:
    from oodbench.data import catalog

    return Case(["data", "list"], [[n] for n in catalog.available()])


def _published_list(_: World) -> Case:
    from oodbench import published

    return Case(["published", "list"],
                [[n, str(len(published.load(n)))] for n in published.tables()])


def _listed(word: str) -> Callable[[World], Case]:
    """``oodbench list WORD`` of a registry of ``oodbench.cli.listing.REGISTRIES``: each
    entry's name."""
    def case(_: World) -> Case:
        from oodbench.cli.listing import registry

        return Case(["list", word], [[name] for name in registry(word)])
    return case


METHOD = ("imagenet1k-vs-sun", "ReAct (ResNet-50)")


def _published_show(_: World) -> Case:
    from oodbench import published

    rows = published.select(published.load(METHOD[0]), METHOD[1])
    return Case(["published", "show", METHOD[0], "--method", METHOD[1]],
                rows[["method", "ood_set", "metric", "value"]].values.tolist())


def _printed(table: str, method: str | None = None) -> Callable[[World], Case]:
    def case(_: World) -> Case:
        from oodbench import published

        spec = published.table_info(table).printed
        rows = published.printed(table)
        args = ["published", "show", table, "--printed"]
        if method is not None:
            rows = published.select(rows, method)
            args += ["--method", method]
        return Case(args, rows[[*spec["key"], *spec["values"]]].values.tolist())
    return case


def _paper_leaderboard(_: World) -> Case:
    from oodbench.results import paper

    board = paper.leaderboard(paper.load(), "max_logit", [0, 5, 10], 10)
    return Case(["paper", "leaderboard", "--kappa", "max_logit", "--levels", "0,5,10"],
                [[str(r.rank), r.model, cell_text(r.auroc)] for r in board.itertuples()])


def _paper_show(_: World) -> Case:
    from oodbench.results import paper

    rows = paper.get("vit_large_patch32_384", "max_logit", df=paper.load())
    return Case(["paper", "show", "vit_large_patch32_384", "--kappa", "max_logit"],
                [[str(r.level), cell_text(r.auroc)] for r in rows.itertuples()])


def _paper_rank(w: World) -> Case:
    from oodbench.cli.paper import _read_results
    from oodbench.results import paper

    ranked = paper.rank(paper.load(), _read_results(w.cood)[0], allow_mismatch=True)
    return Case(["paper", "rank", str(w.cood), "--allow-mismatch"],
                [[r.detector, r.kappa, str(r.level), cell_text(r.auroc),
                  cell_text(r.percentile_rank)] for r in ranked.itertuples()])


def _cache_ls(w: World) -> Case:
    from oodbench.cli.cache import human_bytes
    from oodbench.extract import list_cache

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OODBENCH_CACHE", str(w.cache))
        entries = list_cache()
    return Case(["cache", "ls"], [[e["key"][:12], f"{e['n']}/{e['n_source']}",
                                   human_bytes(e["size_bytes"])] for e in entries])


def _cache_verify(w: World) -> Case:
    return Case(["cache", "verify"], [[w.key[:12]]])


def _report(w: World) -> Case:
    from oodbench.results import leaderboard as lb
    from oodbench.results.table import ResultsTable

    board = lb.leaderboard(ResultsTable(w.compared).read(), "mos-imagenet")
    return Case(["report", str(w.compared), "--out", str(w.compared / "report")],
                [[str(r.rank), r.model, r.label, f"{r.auroc:.4f}"] for r in board.itertuples()])


CASES: dict[str, Callable[[World], Case]] = {
    "list detectors": _registry("detectors"),
    "list losses": _registry("losses"),
    "list models": _models,
    "list benchmarks": _benchmarks,
    "data list": _datasets,
    "published list": _published_list,
    "published show": _published_show,
    "published show --printed": _printed(*METHOD),
    "published show --printed (openood)": _printed("openood-v1.5-imagenet1k-fsood"),
    "paper leaderboard": _paper_leaderboard,
    "paper show": _paper_show,
    "paper rank": _paper_rank,
    "cache ls": _cache_ls,
    "cache verify": _cache_verify,
    "report": _report,
}
#: every other word of ``oodbench list``: one case each, from the listing's own table of them
CASES.update({f"list {word}": _listed(word) for word in REGISTRIES})


def _invoke(world: World, args: list[str], env: dict[str, str | None]):
    result = CliRunner().invoke(main, args, env={**env, "OODBENCH_CACHE": str(world.cache)})
    assert result.exit_code == 0, result.output
    return result


def _cells(line: str) -> list[str]:
    return [c.strip() for c in CELL_SEPARATORS.split(line)]


def _has_row(lines: list[str], row: list[str]) -> bool:
    """Whether one table line holds each cell of ``row`` whole, in order."""
    for line in lines:
        cells = iter(_cells(line))
        if all(any(c == want for c in cells) for want in row):
            return True
    return False


@pytest.mark.parametrize("name", list(CASES))
def test_every_table_fits_80_columns_with_its_key_columns_whole(name: str, world: World) -> None:
    case = CASES[name](world)
    assert case.rows, name  # something to look for
    output = _invoke(world, case.args, TERMINAL_80).stdout
    lines = output.splitlines()
    assert "\x1b" not in output  # TERM=dumb: cell widths are what the lines hold
    too_wide = [line for line in lines if cell_len(line) > 80]
    assert not too_wide, "\n".join(too_wide)
    assert "…" not in output
    missing = [row for row in case.rows if not _has_row(lines, [str(c) for c in row])]
    assert not missing, f"{missing}\n{output}"


def test_published_compare_reads_as_blocks_within_80_columns(world: World) -> None:
    from oodbench import published
    from oodbench.results.table import ResultsTable

    compared = published.compare(ResultsTable(world.compared).read())
    output = _invoke(world, ["published", "compare", str(world.compared)], TERMINAL_80).stdout
    assert max(cell_len(line) for line in output.splitlines()) <= 80
    flat = " ".join(output.split())  # the blocks, unwrapped
    for r in compared.itertuples():
        assert f"{r.model} · {r.detector} · {r.benchmark} · {r.group} · {r.metric}: " \
               f"yours {r.yours} {r.unit}" in flat
        assert " ".join(r.comparison.split()) in flat
    from oodbench.published.compare import summary_text

    assert summary_text(compared) in flat  # every results row counted


@pytest.mark.parametrize("name", [*CASES, "published compare"])
def test_piped_output_is_tab_separated_whole_rows(name: str, world: World) -> None:
    args = (["published", "compare", str(world.compared)] if name == "published compare"
            else CASES[name](world).args)
    output = _invoke(world, args, PIPED).stdout
    assert "…" not in output and not BOX.search(output), output
    header, *rows = output.splitlines()
    assert rows and "\t" in header
    assert {line.count("\t") for line in rows} == {header.count("\t")}, output  # a line per row


def test_list_detectors_piped_greps(world: World) -> None:
    """`oodbench list detectors | grep temperature_scaling` finds its row (issue 33)."""
    lines = _invoke(world, ["list", "detectors"], PIPED).stdout.splitlines()
    assert lines[0].startswith("name\t")
    assert any(line.startswith("temperature_scaling\t") for line in lines)
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    done = subprocess.run(f"{sys.executable} -m oodbench list detectors | grep temperature_scaling",
                          shell=True, capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={**env, "PYTHONPATH": str(REPO / "src")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("temperature_scaling\t"), done.stdout


def test_wide_and_an_explicit_table_show_every_column_in_full(world: World) -> None:
    from oodbench import detectors

    row = next(r for r in detectors.available() if r["name"] == "temperature_scaling")
    narrow = _invoke(world, ["list", "detectors"], TERMINAL_80).stdout
    assert "not shown at 80 columns: valid values, defaults, paper" in " ".join(narrow.split())
    for args, env in ((["--wide"], TERMINAL_80), (["--format", "table"], PIPED)):
        output = _invoke(world, ["list", "detectors", *args], env).stdout
        line = next(ln for ln in output.splitlines() if "temperature_scaling" in ln)
        assert _cells(line)[-2] == row["paper"] and cell_len(line) > 80, args
        assert "…" not in output and "not shown" not in output


def test_fit_keeps_key_columns_whole_and_drops_long_texts_first() -> None:
    natural = {"name": 19, "needs": 30, "presets": 25, "defaults": 60, "paper": 70}
    # borders and padding: 3 cells a column + 1. At 80 cells: 5 columns need at least
    # 16 + 19 + 4 x 16 = 99, so paper (the first long text) goes; 4 need 13 + 19 + 3 x 16 = 80
    widths = fit(natural, key={"name"}, drop_first=("paper", "defaults"), width=80)
    assert widths == {"name": 19, "needs": 16, "presets": 16, "defaults": 16}
    # at 79, defaults goes too; needs and presets share 79 - 10 - 19 = 50 cells at one level
    widths = fit(natural, key={"name"}, drop_first=("paper", "defaults"), width=79)
    assert widths == {"name": 19, "needs": 25, "presets": 25}
    # key columns alone wider than the terminal: the widest folds first, to fit 60 - 7 cells
    assert fit({"a": 50, "b": 20}, key={"a", "b"}, drop_first=(), width=60) == {"a": 33, "b": 20}
