"""``oodbench demo``: runs offline end to end, its numbers check out, and it is deterministic."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file
from sklearn.metrics import roc_auc_score

from oodbench import detectors
from oodbench.cli.main import main
from oodbench.data.demo import KINDS, demo_data
from oodbench.demo import COOD_NAME, DEMO_K, DEMO_LEVELS, FAR_NAME
from oodbench.demo_losses import DETECTORS as LOSS_DETECTORS
from oodbench.demo_losses import LOSSES
from oodbench.models.small_cnn import SmallCNN
from oodbench.results.table import ResultsTable
from tests._tolerance import auroc_slack


def msp(model: SmallCNN, images: np.ndarray) -> np.ndarray:
    """MSP from the raw uint8 pixels, without oodbench's sources, extraction or detectors."""
    x = torch.from_numpy(images[..., 0].astype(np.float32) / 255.0).unsqueeze(1)
    with torch.no_grad():
        return torch.softmax(model(x).double(), dim=1).max(dim=1).values.numpy()


def _tables(page: Path, folder: Path) -> list[str]:
    """The ``<table>`` elements of a report page, its output folder's path as ``OUT``."""
    return re.findall(r"<table.*?</table>", page.read_text().replace(str(folder), "OUT"), re.S)


@pytest.mark.heavy
def test_demo_runs_checks_out_and_is_deterministic(tmp_path, monkeypatch, quick_tour_run):
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / "cache-a"))
    out = tmp_path / "a"
    # without figures: the quick tour's `oodbench demo` (compared below) draws them
    result = CliRunner().invoke(main, ["demo", "--out", str(out), "--no-progress", "--no-figures"],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    for text in (COOD_NAME, FAR_NAME, "FPR@95 (ID positive)", "FPR@95 (OOD positive, OpenOOD)",
                 f"report: {out / 'report.html'}", "cells: "):
        assert text in result.output
    # issue 23 item 9: the demo drew a LargeKWarning (knn k = 50 on its 650-row bank)
    for name in ("knn", "nnguide"):
        assert f"warning: detector {name!r}: k=" not in result.output, result.output
    assert "LargeKWarning" not in result.output
    rows = ResultsTable(out).read()
    knn = rows[rows["detector"].isin(["knn", "nnguide"])].drop_duplicates("cell")
    assert {h["k"] for h in knn["hyperparams"]} == {DEMO_K}

    # every registered detector that needs neither CLIP nor a group-softmax head ran on both
    # benchmarks, none failed
    applicable = {r["name"] for r in detectors.available()
                  if not {"text_embeddings", "groups"} & set(r["requires"])}
    cells = rows.drop_duplicates("cell")
    assert set(cells["detector"]) == applicable
    assert cells["status"].eq("ok").all(), cells.loc[cells["status"] != "ok", ["detector", "error"]]
    assert len(cells) == 2 * len(applicable)
    clip_only = sorted(set(r["name"] for r in detectors.available()) - applicable)
    assert f"not run: {', '.join(clip_only)}" in result.output

    # the loss comparison: one model per loss, the same detectors, every cell ok
    losses = ResultsTable(out / "losses").read().drop_duplicates("cell")
    assert set(losses["model"]) == set(LOSSES) and set(losses["detector"]) == set(LOSS_DETECTORS)
    assert len(losses) == 2 * len(LOSSES) * len(LOSS_DETECTORS) and losses["status"].eq("ok").all()
    assert "Training losses" in result.output and (out / "losses" / "report.html").exists()

    # MSP AUROC of each far set from the trained weights and sklearn, independently of oodbench
    data = demo_data(seed=0)
    model = SmallCNN(6, seed=0)
    model.load_state_dict(load_file(str(out / "small_cnn.safetensors")))
    model.eval()
    id_images = data.id_test.parent.images[data.id_test.indices]
    id_msp = msp(model, id_images)
    ok = rows[(rows["detector"] == "msp") & (rows["metric"] == "auroc")]
    for group in KINDS:
        ood_msp = msp(model, data.ood[group].images)
        expected = roc_auc_score(np.r_[np.ones(id_msp.size), np.zeros(ood_msp.size)], np.r_[id_msp, ood_msp])
        got = ok[(ok["benchmark"] == FAR_NAME) & (ok["group"] == group)]["value"].item()
        # the stored scores are these to 1e-6 relative (float32 passes in other batches, float32
        # exps; checked below): only pairs that close may swap
        tol = auroc_slack(id_msp, ood_msp, 1e-6 * id_msp, 1e-6 * ood_msp)
        assert got == pytest.approx(expected, abs=tol), group
    id_acc = rows[(rows["metric"] == "id_accuracy")]["value"].unique()
    assert id_acc.size == 1
    assert id_acc[0] == pytest.approx((model(torch.from_numpy(
        id_images[..., 0].astype(np.float32) / 255).unsqueeze(1)).argmax(1).numpy()
        == np.asarray(data.id_test.labels)).mean())

    # C-OOD: one held-out digit per level, levels ordered by their severity score
    cood = rows[(rows["benchmark"] == COOD_NAME) & (rows["detector"] == "msp")]
    severity = cood[cood["metric"] == "severity"].sort_values("level")
    assert severity["level"].tolist() == list(range(DEMO_LEVELS))
    assert severity["value"].is_monotonic_increasing
    cell = cood["cell"].iloc[0]
    id_scores, levels = ResultsTable(out).load_scores(cell)
    np.testing.assert_allclose(id_scores, id_msp, rtol=1e-6)  # ~1e-7 (above)
    for name, scores in levels.items():
        auroc = cood[(cood["group"] == name) & (cood["metric"] == "auroc")]["value"].item()
        labels = np.r_[np.ones(id_scores.size), np.zeros(scores.size)]
        # the stored scores ranked by both: counts divided once, sklearn's trapezoids ~1e-15
        assert auroc == pytest.approx(roc_auc_score(labels, np.r_[id_scores, scores]), abs=1e-9)
        assert 40 <= scores.size <= 50  # the 25 % test part of one digit class (~180 images)
    html = (out / "report.html").read_text()
    assert "Figures left out (written with --no-figures)" in html and "<img" not in html
    assert (out / "report.md").exists()
    # the published results section: the digits CNN is a near-match of the ImageNet rows of its
    # detectors on 'textures', and the report says what differs
    summary = (out / "report.md").read_text()
    section = summary[summary.index("## Published results"):]
    assert "0 of " in section and "rows match; " in section and "(counted over every result row)" in section
    assert "| small_cnn | react | letters, photos, textures, noise | textures | auroc |" in section
    assert "not comparable: backbone and weights: published ResNet-50" in section

    # a second run from scratch gives identical values: the quick tour's `oodbench demo`
    # (another process, a fresh cache: a new training run and forward pass; tests/_quick_tour.py)
    tour_demo = quick_tour_run.folder / "oodbench-demo"
    assert (tour_demo / "report.html").is_file(), quick_tour_run.failure
    tour_html = (tour_demo / "report.html").read_text()  # the figures, as PNGs in the page
    assert (tour_demo / "report.html").stat().st_size > 50_000 and "<img" in tour_html
    assert "Figures left out" not in tour_html
    for report in ("report.html", "losses/report.html"):  # the same tables, figures or not
        assert _tables(tour_demo / report, tour_demo) == _tables(out / report, out)
    again = ResultsTable(tour_demo).read()
    key = ["benchmark", "detector", "hyperparams", "group", "metric"]
    a = rows.sort_values(key).reset_index(drop=True)
    b = again.sort_values(key).reset_index(drop=True)
    assert a[key].equals(b[key])
    np.testing.assert_array_equal(a["value"].to_numpy(), b["value"].to_numpy())
