"""``oodbench.cood.benchmark``: one call from any model form to the per-level table and its rank."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from torch import nn

from oodbench import cood
from oodbench.benchmarks.cood import CoodBenchmark
from oodbench.data import ImageFolder
from oodbench.detectors import create
from oodbench.errors import InvalidInputError, ProtocolMismatchError
from oodbench.results import paper

POOL_CLASSES = 8


class Tiny(nn.Module):
    """A small convolutional network with a linear head; counts its forward passes."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                                  nn.Flatten())
        self.fc = nn.Linear(16, 3)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.fc(self.body(x))


def to_tensor(image: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path]:
    """ID test: 3 classes x 6 images; pool: 8 classes x 6 images (12 x 12 RGB)."""
    rng = np.random.default_rng(0)
    for split, classes in (("id", ["a", "b", "c"]), ("pool", [f"p{i}" for i in range(POOL_CLASSES)])):
        for j, cls in enumerate(classes):
            folder = tmp_path / split / cls
            folder.mkdir(parents=True)
            for i in range(6):
                pixels = np.clip(rng.normal(40 * j, 60, (12, 12, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")
    return tmp_path / "id", tmp_path / "pool"


OPTIONS = {"n_levels": 4, "window": 2, "batch_size": 16}


def test_every_model_form_gives_the_same_table(trees: tuple[Path, Path]) -> None:
    id_dir, pool_dir = trees
    net = Tiny()
    by_module = cood.benchmark(net, ["softmax", "max_logit"], id_test=id_dir, pool=pool_dir,
                               transforms=to_tensor, **OPTIONS)
    by_dict = cood.benchmark({"model_name": "tiny", "model": net, "transforms": to_tensor},
                             ["msp", "maxlogit"], id_test=id_dir, pool=pool_dir, **OPTIONS)
    assert by_module["model"].iloc[0] == "module:Tiny" and by_dict["model"].iloc[0] == "tiny"
    cols = ["detector", "level", "auroc", "fpr95_id", "auroc_ci_low", "auroc_ci_high"]
    pd.testing.assert_frame_equal(by_module[cols], by_dict[cols])
    assert by_module["detector"].tolist() == ["msp"] * 4 + ["maxlogit"] * 4
    assert by_module["kappa"].tolist() == ["softmax"] * 4 + ["max_logit"] * 4
    assert by_module["level"].tolist() == [0, 1, 2, 3] * 2
    assert (by_module["auroc_ci_low"] <= by_module["auroc"]).all()
    assert (by_module["auroc"] <= by_module["auroc_ci_high"]).all()
    assert set(by_module["n_levels"]) == {4} and set(by_module["n_pool_classes"]) == {POOL_CLASSES}


def test_equals_the_benchmark_it_wraps_and_caches(trees: tuple[Path, Path]) -> None:
    id_dir, pool_dir = trees
    net = Tiny()
    table = cood.benchmark(net, "entropy", id_test=id_dir, pool=pool_dir, transforms=to_tensor,
                           levels=[0, 3], **OPTIONS)
    calls = net.calls
    assert calls > 0 and table["level"].tolist() == [0, 3]
    again = cood.benchmark(net, "entropy", id_test=id_dir, pool=pool_dir, transforms=to_tensor,
                           levels=[0, 3], **OPTIONS)
    assert net.calls == calls  # the second call reads the activation cache
    pd.testing.assert_frame_equal(table, again)
    direct = CoodBenchmark(ImageFolder(id_dir), ImageFolder(pool_dir), window=2, n_levels=4)
    wide = direct.run(cood.as_classifier(net, to_tensor), [create("entropy")], progress=False)
    expected = wide[wide["level"].isin([0, 3])].reset_index(drop=True)
    for col in ("auroc", "fpr95_ood", "aupr_in", "severity", "n_ood"):
        assert table[col].tolist() == expected[col].tolist(), col


def test_spec_strings_and_classifiers(trees: tuple[Path, Path], monkeypatch) -> None:
    import oodbench.models

    id_dir, pool_dir = trees
    classifier = cood.as_classifier(Tiny(), to_tensor)
    loaded = []
    monkeypatch.setattr(oodbench.models, "load", lambda spec: loaded.append(spec) or classifier)
    table = cood.benchmark("timm:some_net", "softmax", id_test=id_dir, pool=pool_dir, **OPTIONS)
    assert loaded == ["timm:some_net"] and len(table) == 4
    same = cood.benchmark(classifier, "softmax", id_test=id_dir, pool=pool_dir, **OPTIONS)
    assert table["auroc"].tolist() == same["auroc"].tolist()
    by_name = cood.benchmark({"model_name": "timm:other"}, "softmax", id_test=id_dir,
                             pool=pool_dir, **OPTIONS)
    assert loaded[-1] == "timm:other" and len(by_name) == 4


def test_results_folder_feeds_rank_and_report(trees: tuple[Path, Path], tmp_path: Path) -> None:
    from click.testing import CliRunner

    from oodbench.cli.main import main
    from oodbench.results.report import write_report

    id_dir, pool_dir = trees
    out = tmp_path / "results"
    table = cood.benchmark(Tiny(), ["softmax", "max_logit"], id_test=id_dir, pool=pool_dir,
                           transforms=to_tensor, out=out, **OPTIONS)
    with pytest.raises(ProtocolMismatchError, match="window"):
        paper.rank(paper.load(), table)  # a 4-level toy pool is not the paper's benchmark
    ranked = paper.rank(paper.load(), table, allow_mismatch=True)
    assert len(ranked) == 8 and not ranked["comparable"].any()
    assert set(ranked["kappa"]) == {"softmax", "max_logit"}
    fig = paper.plot_among_published(paper.load(), table, detector="msp")
    assert len(fig.axes[0].containers) == 1  # my curve with its DeLong error bars
    refused = CliRunner().invoke(main, ["paper", "rank", str(out)])
    assert refused.exit_code == 2 and "window (OOD classes per level): paper 1,000, yours 2" \
        in refused.output
    flagged = CliRunner().invoke(main, ["paper", "rank", str(out), "--allow-mismatch"])
    assert flagged.exit_code == 0 and "NOT comparable" in flagged.output
    files = write_report(out)
    assert "severity" in files.html.read_text().lower()


def test_bad_input(trees: tuple[Path, Path]) -> None:
    id_dir, pool_dir = trees
    with pytest.raises(InvalidInputError, match="unknown keys"):
        cood.benchmark({"name": "x"}, id_test=id_dir, pool=pool_dir, **OPTIONS)
    with pytest.raises(InvalidInputError, match="no nn.Linear head"):
        cood.benchmark(nn.Sequential(nn.Conv2d(3, 3, 1)), id_test=id_dir, pool=pool_dir,
                       **OPTIONS)
    with pytest.raises(InvalidInputError, match="levels"):
        cood.benchmark(Tiny(), id_test=id_dir, pool=pool_dir, levels=[7], **OPTIONS)
    with pytest.raises(InvalidInputError, match="fit="):
        cood.benchmark(Tiny(), "knn", id_test=id_dir, pool=pool_dir, transforms=to_tensor,
                       **OPTIONS)
    with pytest.raises(InvalidInputError, match="model must be"):
        cood.benchmark(42, id_test=id_dir, pool=pool_dir, **OPTIONS)  # type: ignore[arg-type]


@pytest.mark.heavy
def test_real_model_on_real_images_and_a_cifar_pool(lite0_imagenet_val, cifar10_test) -> None:
    """EfficientNet-Lite0 (real weights), the 1,300 real ImageNet images as ID, CIFAR-10 classes
    as a 4-level pool: the table is right, and ranking it against the paper is refused (issue
    12.8) until the mismatch is allowed, then flagged."""
    model, _val, acts = lite0_imagenet_val
    table = cood.benchmark(model, ["softmax", "max_logit"], id_test=acts, pool=cifar10_test,
                           n_levels=4, window=2, images_per_class=20, batch_size=50)
    assert len(table) == 8 and set(table["n_id"]) == {1300}
    assert table["auroc"].between(0.5, 1.0).all()  # a real ImageNet model does detect CIFAR
    assert (table["auroc_ci_high"] - table["auroc_ci_low"]).between(0.0, 0.3).all()
    msp = table[table["detector"] == "msp"]
    assert msp["severity"].is_monotonic_increasing  # harder levels: more confident on OOD
    with pytest.raises(ProtocolMismatchError, match="severity levels: paper 11, yours 4"):
        paper.rank(paper.load(), table)
    ranked = paper.rank(paper.load(), table, allow_mismatch=True)
    assert ranked["n_published"].gt(500).all() and not ranked["comparable"].any()
