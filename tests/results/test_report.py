"""Leaderboards, figures and the HTML/Markdown report, including a render in headless Chromium."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

from oodbench.cli.main import main
from oodbench.errors import MissingDataError
from oodbench.results import leaderboard as lb
from oodbench.results import table as rt
from oodbench.results.report import write_report
from oodbench.results.table import ResultsTable

MODELS = ("resnet", "vit")
DETECTORS = {"msp": "{}", "energy": '{"temperature": 1.0}', "knn": '{"k": 5}'}
LEVELS = 3
SETS = {"ssb": "near", "inat": "far", "textures": "far"}
METRICS = ("auroc", "fpr95_id", "fpr95_ood", "aupr_in", "aupr_out")


def make_results(folder: Path) -> pd.DataFrame:
    """A results folder with two benchmarks, two models, three detectors, scores and a failure."""
    rng = np.random.default_rng(0)
    table = ResultsTable(folder)
    wides = []
    for model in MODELS:
        for det, hp in DETECTORS.items():
            for bench in ("cood", "sets"):
                groups = [f"level_{i}" for i in range(LEVELS)] if bench == "cood" else list(SETS)
                rows = []
                for i, group in enumerate(groups):
                    row = {"detector": det, "hyperparams": hp, "group": group, "n_id": 50, "n_ood": 20,
                           **{m: float(rng.uniform(0.5, 1.0)) for m in METRICS},
                           "id_accuracy": 0.8 if model == "resnet" else 0.9}
                    row.update({"level": i} if bench == "cood" else {"kind": SETS[group]})
                    rows.append(row)
                wide = pd.DataFrame(rows)
                cell = f"{model}-{det}-{bench}"
                table.append(rt.from_wide(wide, model=model, benchmark=bench, cell=cell, seconds=1.0,
                                          time="2024-01-01T00:00:00", experiment="synthetic"))
                wides.append(wide.assign(model=model, benchmark=bench))
                table.save_scores(cell, rng.normal(1, 1, 50), {g: rng.normal(0, 1, 20) for g in groups})
    table.append(rt.status_row(model="vit", detector="vim", hyperparams="{}", benchmark="sets",
                               cell="vit-vim-sets", status="failed",
                               error="InvalidInputError: vim <needs> & features", seconds=0.1, time="t"))
    table.append(rt.status_row(model="vit", detector="neglabel", hyperparams="{}", benchmark="sets",
                               cell="vit-neglabel-sets", status="skipped",
                               error="needs CLIP text embeddings", seconds=0.0, time="t"))
    (folder / "experiment.toml").write_text('[experiment]\nname = "synthetic"\n# config marker\n')
    return pd.concat(wides, ignore_index=True)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    folder = tmp_path_factory.mktemp("results")
    return folder, make_results(folder)


def test_leaderboard_means_and_order(results):
    folder, wide = results
    rows = ResultsTable(folder).read()
    for bench in ("cood", "sets"):
        board = lb.leaderboard(rows, bench)
        expected = wide[wide["benchmark"] == bench].groupby(["model", "detector"])[list(METRICS)].mean()
        assert len(board) == len(MODELS) * len(DETECTORS)
        for _, row in board.iterrows():
            for metric in METRICS:
                assert row[metric] == pytest.approx(expected.loc[(row["model"], row["detector"]), metric])
        assert board["auroc"].is_monotonic_decreasing and board["rank"].tolist() == list(range(1, 7))
        assert set(board["groups"]) == {LEVELS if bench == "cood" else len(SETS)}
    assert lb.leaderboard(rows, "sets", sort_by="fpr95_id")["fpr95_id"].is_monotonic_increasing
    assert lb.is_severity(rows, "cood") and not lb.is_severity(rows, "sets")


def test_near_far_and_by_group(results):
    folder, wide = results
    rows = ResultsTable(folder).read()
    nf = lb.near_far(rows, "sets").set_index(["model", "detector"])
    sets = wide[wide["benchmark"] == "sets"]
    for (model, det), row in nf.iterrows():
        mine = sets[(sets["model"] == model) & (sets["detector"] == det)]
        assert row["auroc near"] == pytest.approx(mine[mine["kind"] == "near"]["auroc"].mean())
        assert row["auroc far"] == pytest.approx(mine[mine["kind"] == "far"]["auroc"].mean())
        assert row["fpr95_ood far"] == pytest.approx(mine[mine["kind"] == "far"]["fpr95_ood"].mean())
    assert lb.near_far(rows, "cood").empty
    grid = lb.by_group(rows, "cood")
    assert [c for c in grid.columns if c.startswith("level_")] == ["level_0", "level_1", "level_2"]


def test_detector_labels_show_only_varying_hyperparams():
    rows = pd.DataFrame({"detector": ["knn", "knn", "msp"],
                         "hyperparams": ['{"k": 1, "seed": 0}', '{"k": 5, "seed": 0}', "{}"]})
    assert lb.detector_labels(rows).tolist() == ["knn (k=1)", "knn (k=5)", "msp"]


def test_report_contents(results, tmp_path):
    folder, wide = results
    files = write_report(folder, out=tmp_path)
    page = files.html.read_text()
    # leaderboards with both FPR@95 conventions named, best values marked
    for label in ("FPR@95 (ID positive)", "FPR@95 (OOD positive, OpenOOD)", "AUROC", "AUPR-In"):
        assert label in page
    # cood, sets, published results, score distributions, failures, configuration
    assert page.count("<h2>") == 6
    assert "Severity curves" in page and "Near-OOD and far-OOD means" in page
    assert "class=best" in page
    best = wide[wide["benchmark"] == "cood"].groupby(["model", "detector"])["auroc"].mean().max()
    assert re.search(rf"<td class=best>{best:.4f}</td>", page)
    # figures are embedded PNGs that decode: 2 severity curves, 2 heatmaps, histograms
    images = re.findall(r'<img alt="([^"]*)" src="data:image/png;base64,([^"]+)"', page)
    assert len(images) >= 4 + 2
    for _, data in images:
        with Image.open(io.BytesIO(base64.b64decode(data))) as im:
            assert im.format == "PNG" and im.width > 300
    assert any("ID against OOD scores" in alt for alt, _ in images)
    # failures (escaped), skipped cells, configuration and versions
    assert "InvalidInputError: vim &lt;needs&gt; &amp; features" in page
    assert "needs CLIP text embeddings" in page
    assert "# config marker" in page and "numpy" in page
    assert "http://" not in page and "https://" not in page  # self-contained
    md = files.markdown.read_text()
    assert md.startswith("# synthetic") and "| FPR@95 (ID positive) |" in md
    assert "vit · vim · sets: InvalidInputError" in md
    assert md.count("## ") == 4  # two benchmarks, the published results and the failures
    # knn on 'textures': a near-match with the tuning table's per-set KNN rows, value withheld
    assert "<h2>Published results</h2>" in page and "## Published results" in md
    # counted over every finished result row (ID accuracy once per cell), not only the 14 with
    # a published candidate
    done = ResultsTable(folder).read().query("status == 'ok'")
    per_cell = done["metric"] == "id_accuracy"
    total = int((~per_cell).sum()) + len(done[per_cell].drop_duplicates("cell"))
    assert (f"0 of {total:,} rows match; 14 have a near-match; {total - 14:,} have no published "
            "counterpart (counted over every result row)") in md
    near = next(ln for ln in md.splitlines() if "| resnet | knn | sets | textures | auroc |" in ln)
    assert "| not comparable: backbone and weights: published ResNet-50 (cross-entropy" in near
    assert "yours resnet; benchmark: published openood-v1.5-imagenet" in near


def test_report_without_figures_has_the_same_tables_and_says_so(results, tmp_path):
    folder, _ = results
    full = write_report(folder, out=tmp_path / "full").html.read_text()
    bare = write_report(folder, out=tmp_path / "bare", figures=False).html.read_text()
    assert "<img" in full and "<img" not in bare
    # one note per figure section: each benchmark's curves or heat maps, and the histograms
    assert bare.count("Figures left out (written with --no-figures).") == 2 + 1
    tables = re.compile(r"<table.*?</table>", re.S)
    assert tables.findall(bare) == tables.findall(full)
    no_hist = CliRunner().invoke(main, ["report", str(folder), "--out", str(tmp_path / "x"),
                                        "--no-figures", "--hist", "vit:knn"])
    assert no_hist.exit_code == 2 and "--no-figures" in no_hist.output
    cli = CliRunner().invoke(main, ["report", str(folder), "--out", str(tmp_path / "cli"),
                                    "--no-figures", "--format", "tsv"])
    assert cli.exit_code == 0, cli.output
    assert "<img" not in (tmp_path / "cli" / "report.html").read_text()


def test_report_puts_the_published_value_beside_a_match(tmp_path):
    """A results row with every key of the ImageNet-1k vs SUN ReAct row, and one with another
    model: the report shows 88.16 beside the first and what differs beside the second."""
    from tests.published.test_compare import _row

    table = ResultsTable(tmp_path / "r")
    frame = pd.DataFrame([_row(), _row(model="efficientnet_lite0")])
    table.append(frame.assign(cell=["a", "b"], time="2024-01-01T00:00:00", experiment="x"))
    files = write_report(tmp_path / "r")
    md = files.markdown.read_text()
    section = md[md.index("## Published results"):]
    match = next(line for line in section.splitlines() if "timm:resnet50.tv_in1k" in line)
    assert "| 88.16 | 88.16 |" in match and "ReAct (ResNet-50)" in match
    near = next(line for line in section.splitlines() if "efficientnet_lite0" in line)
    assert "not comparable: backbone and weights: published ResNet-50" in near
    assert "1 of 2 rows match; 1 has a near-match; 0 have no published counterpart" in section
    assert "| backbone and weights | 1 | react | imagenet1k-vs-sun |" in section  # by reason
    page = files.html.read_text()
    assert "<td class=text>88.16</td><td class=text>88.16</td>" in page
    matches = page[page.index("<h3>Matches</h3>"):page.index("<h3>Near-matches")]
    assert "timm:resnet50.tv_in1k" in matches and "efficientnet_lite0" not in matches
    details = page[page.index("<details><summary>The 1 near-matches, row by row</summary>"):]
    assert "efficientnet_lite0" in details[:details.index("</details>")]  # collapsed


def test_histograms_for_chosen_pairs(results, tmp_path):
    folder, _ = results
    page = write_report(folder, out=tmp_path, histograms=[("vit", "knn")]).html.read_text()
    alts = re.findall(r'<img alt="ID against OOD scores: ([^"]*)"', page)
    assert sorted(alts) == ["vit · knn · cood", "vit · knn · sets"]


def test_report_of_a_folder_without_results(tmp_path):
    with pytest.raises(MissingDataError, match="no results.parquet"):
        write_report(tmp_path)


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no chromium on PATH (Debian: apt-get install chromium; .ci/run installs it)")


def test_report_renders_in_headless_chromium(results, tmp_path):
    browser = chromium()
    folder, _ = results
    html = write_report(folder, out=tmp_path).html
    shot = tmp_path / "report.png"
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
           "--window-size=1280,2000", html.resolve().as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert shot.exists(), f"chromium wrote no screenshot (rc {done.returncode}): {done.stderr[-2000:]}"
    with Image.open(shot) as im:
        pixels = np.asarray(im.convert("L"), dtype=float)
    assert pixels.shape == (2000, 1280)
    assert pixels.std() > 20  # not a blank page: text, tables and figures
    # the page is laid out, not raw text: the top has the white main column on a grey ground
    assert (pixels[:, :50] > 240).mean() > 0.9 and (pixels > 250).mean() > 0.3
    print(json.dumps({"screenshot": str(shot), "std": round(float(pixels.std()), 1)}))


def test_labels_name_the_preset_and_the_fit_data():
    rows = pd.DataFrame({"model": ["m"] * 3, "detector": ["react", "react", "msp"],
                         "hyperparams": ['{"fit_data": "id_val", "percentile": 90.0}',
                                         '{"fit_data": "train", "percentile": 90.0}', "{}"]})
    results = rows.assign(preset=["openood", "", ""], fit_data=["id_val", "train", "none"])
    assert lb.detector_labels(rows, results).tolist() == [
        "react [openood, fit on id_val]", "react [fit on train]", "msp"]
    assert lb.detector_labels(rows).tolist()[2] == "msp"  # rows without provenance columns


def test_leaderboard_fits_a_1400_px_window(tmp_path):
    """Issue 23 item 9: at 1,400 px the leaderboard hid its last columns behind a horizontal
    scroll. Laid out by headless Chromium: no table of the report scrolls at that width."""
    browser = chromium()
    rng = np.random.default_rng(0)
    table = ResultsTable(tmp_path / "r")
    configs = {"react": '{"fit_data": "train", "percentile": 99.0}',
               "knn": '{"fit_data": "train", "fit_fraction": 1.0, "k": 50, "seed": 0}',
               "vra": '{"fit_data": "id_val", "lower_percentile": 60.0, "per_unit": false, '
                      '"upper_percentile": 95.0}',
               "plf": '{"fit_data": "train", "lower_percentile": 10.0, "slope": 2.5, '
                      '"upper_percentile": 90.0}', "msp": "{}"}
    for det, hp in configs.items():
        tuned = json.dumps({"protocol": "held_out_classes", "best_params": {"slope": 2.5}})
        rows = [{"detector": det, "hyperparams": hp, "group": g, "kind": kind, "n_id": 650,
                 "n_ood": 100, **{m: float(rng.uniform(0.5, 1)) for m in METRICS},
                 "id_accuracy": 0.83, "preset": "" if det == "msp" else "openood",
                 "fit_data": json.loads(hp).get("fit_data", "none"),
                 "tuning": tuned if det in ("react", "plf") else ""}
                for g, kind in (("cat", "near"), ("dog", "near"), ("ship", "far"), ("truck", "far"))]
        table.append(rt.from_wide(pd.DataFrame(rows), model="efficientnet_lite0",
                                  benchmark="cifar-near-far", cell=f"c-{det}", seconds=1.0,
                                  time="2024-01-01T00:00:00", experiment="x"))
    html = write_report(tmp_path / "r").html
    probe = ("<script>document.body.setAttribute('data-overflow', Array.from("
             "document.querySelectorAll('.scroll')).map(e => e.scrollWidth > e.clientWidth ? 1 : 0)"
             ".join(','));</script></body>")
    page = tmp_path / "probe.html"
    page.write_text(html.read_text().replace("</body>", probe))
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1000",
                           "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'data-overflow="([^"]*)"', done.stdout)
    assert found is not None, done.stderr[-2000:]
    flags = found.group(1).split(",")
    assert len(flags) >= 2 and set(flags) == {"0"}, flags  # the leaderboards come first


def test_severity_curves_stay_readable_with_many_detectors():
    """Issue 34: with 39 detectors two shared a colour and a marker. Beyond ALL_COLOURED, the
    HIGHLIGHT best (by mean AUROC) get distinct colours and markers, the others thin grey lines
    under them with one legend entry."""
    from matplotlib.colors import to_rgba

    from oodbench.results import plots

    n = 12
    means = np.linspace(0.95, 0.6, n)  # detector i is the i-th best
    rows = pd.concat([rt.from_wide(pd.DataFrame({
        "detector": f"d{i:02d}", "group": [f"level_{j}" for j in range(LEVELS)],
        "level": range(LEVELS), "auroc": means[i] - 0.05 * np.arange(LEVELS), "n_id": 5,
        "n_ood": 5}), model="m", benchmark="cood", cell=f"c{i}", seconds=0.0, time="t")
        for i in np.random.default_rng(0).permutation(n)], ignore_index=True)
    ax = plots.severity_curves(rows, "cood", "m").axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    best = [f"{i + 1}. d{i:02d}" for i in range(plots.HIGHLIGHT)]
    assert labels == [*best, f"the other {n - plots.HIGHLIGHT} detectors"]
    lines = [line for line in ax.get_lines() if len(line.get_xdata()) == LEVELS]
    grey = [line for line in lines if to_rgba(line.get_color()) == to_rgba("0.78")]
    coloured = {to_rgba(line.get_color()) for line in lines} - {to_rgba("0.78")}
    assert len(grey) == n - plots.HIGHLIGHT and len(coloured) == plots.HIGHLIGHT
    few = rows[rows["detector"].isin([f"d{i:02d}" for i in range(plots.ALL_COLOURED)])]
    few_labels = [t.get_text() for t in
                  plots.severity_curves(few, "cood", "m").axes[0].get_legend().get_texts()]
    assert few_labels == [f"d{i:02d}" for i in range(plots.ALL_COLOURED)]  # all in colour
