"""``[id] fit_transform``: the transform the ID fit data is read with (MOOD's ID statistics come
from its training augmentation). It is another forward pass (its own activation cache key), part
of the cells' keys, recorded in the results, and refused before any extraction where it makes no
sense."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import oodbench
from oodbench.errors import ExperimentError
from oodbench.extract.key import transform_repr
from oodbench.models.fit_transforms import FIT_TRANSFORMS
from oodbench.models.preprocessing import mood_train_transform
from oodbench.run.build import build_source
from oodbench.run.checks import ExperimentCheckError
from oodbench.run.experiment import parse_experiment
from oodbench.run.local import extract_fit
from oodbench.run.plan import make_plan
from tests.extract._toy import TinyNet
from tests.run.tiny import write_tiny_experiment

#: a 3-class model whose eval transform holds a torchvision Normalize (MOOD's augmentation takes
#: its mean and std) and whose convolutions take any image size (the augmentation crops 224 px)
TINY_NET = {"name": "tinynet", "factory": "tests.extract._toy:TinyNet",
            "options": {"num_classes": 3, "width": 4}}


def _experiment(tmp_path: Path, fit_transform: str | None = "mood_train",
                detectors: list[dict[str, Any]] | None = None,
                model: dict[str, Any] | None = None, name: str = "fit") -> dict[str, Any]:
    """The tiny example's images, one model, the named-sets benchmark, MSP (fits on nothing)
    and MOOD (fits on [id].fit)."""
    write_tiny_experiment(tmp_path)
    ids: dict[str, Any] = {"test": {"folder": "data/id_test"}, "fit": {"folder": "data/id_train"}}
    if fit_transform is not None:
        ids["fit_transform"] = fit_transform
    return {
        "experiment": {"name": name, "output": f"out-{name}", "device": "cpu", "batch_size": 8,
                       "num_workers": 0},
        "models": [model or TINY_NET],
        "id": ids,
        "benchmarks": [{"type": "custom", "name": "sets",
                        "groups": {"noise": {"folder": "data/noise"}}}],
        "detectors": detectors or [{"name": "msp"}, {"name": "mood"}],
    }


def _parse(data: dict[str, Any], tmp_path: Path):  # type: ignore[no-untyped-def]
    return parse_experiment(data, base_dir=tmp_path, file=tmp_path / "exp.toml")


def test_the_fit_data_read_another_way_is_another_forward_pass(tmp_path: Path) -> None:
    """``extract_fit`` reads [id].fit through the named transform: its repr is the cache
    key's transform (a different key from the eval pass), and the model keeps its own."""
    exp = _parse(_experiment(tmp_path), tmp_path)
    model, source = TinyNet(num_classes=3, width=4), build_source(exp.id_fit)
    options = {"device": "cpu", "batch_size": 8, "num_workers": 0, "progress": False,
               "capture": ("logits", "features")}
    own = model.transform
    augmented = extract_fit(model, source, "mood_train", options)
    assert model.transform is own  # restored
    plain = extract_fit(model, source, "eval", options)
    assert augmented.meta["transform"] == transform_repr(mood_train_transform(model))
    assert plain.meta["transform"] == transform_repr(own)
    assert augmented.meta["cache_key"] != plain.meta["cache_key"]
    assert not augmented.meta["cache_hit"] and not plain.meta["cache_hit"]
    assert not np.allclose(augmented.features, plain.features)  # 224 px crops, not 12 px images


def test_the_key_changes_the_cells_and_is_recorded_in_the_results(tmp_path: Path) -> None:
    """MOOD fitted on [id].fit read with MOOD's augmentation: its cell key differs from the
    default's, the plan names the transform, and the results record it for MOOD ("" for MSP,
    which fits on nothing); "eval" spelt out is the default (same keys)."""
    default = make_plan(_parse(_experiment(tmp_path, None), tmp_path))
    spelt = make_plan(_parse(_experiment(tmp_path, "eval"), tmp_path))
    assert [c.key for c in default.cells] == [c.key for c in spelt.cells]
    data = _experiment(tmp_path)
    plan = make_plan(_parse(data, tmp_path))
    assert set(c.key for c in plan.cells).isdisjoint(c.key for c in default.cells)
    by_detector = {c.detector: c for c in plan.cells}
    assert by_detector["mood"].fit_transform_used == "mood_train"
    assert "fit on train read with mood_train" in by_detector["mood"].label()
    assert by_detector["msp"].fit_transform_used == ""
    rows = oodbench.run_experiment(_parse(data, tmp_path), progress=False)
    ok = rows[rows["status"] == "ok"]
    assert set(ok["detector"]) == {"msp", "mood"}
    recorded = {d: set(g["fit_transform"]) for d, g in ok.groupby("detector")}
    assert recorded == {"mood": {"mood_train"}, "msp": {""}}
    again = oodbench.run_experiment(_parse(_experiment(tmp_path, None, name="plain"), tmp_path),
                                    progress=False)
    assert set(again[again["detector"] == "mood"]["fit_transform"]) == {"eval"}


@pytest.mark.parametrize(("change", "message"), [
    ({"fit_transform": "mood_trian"}, "Did you mean 'mood_train'"),
    ({"fit_transform": "mood_train", "fit": None}, "there is no [id] fit"),
])
def test_a_bad_value_is_refused_when_the_file_is_read(tmp_path: Path, change: dict[str, Any],
                                                      message: str) -> None:
    data = _experiment(tmp_path)
    data["id"].update(change)
    data["id"] = {k: v for k, v in data["id"].items() if v is not None}
    with pytest.raises(ExperimentError, match=message.replace("[", r"\[").replace("]", r"\]")):
        _parse(data, tmp_path)


def test_a_fit_transform_no_detector_reads_is_refused_when_planned(tmp_path: Path) -> None:
    exp = _parse(_experiment(tmp_path, detectors=[{"name": "msp"}]), tmp_path)
    with pytest.raises(ExperimentError, match="no detector fits on \\[id\\].fit"):
        make_plan(exp)


def test_a_transform_the_model_cannot_take_fails_before_any_extraction(tmp_path: Path) -> None:
    """The tiny example's SmallCNN has no Normalize for MOOD's augmentation to take its mean and
    std from: the up-front checks say so, and nothing is extracted."""
    from oodbench.config import cache_dir

    small = {"name": "small_cnn", "factory": "oodbench.models.small_cnn:SmallCNN",
             "options": {"num_classes": 3, "seed": 0}}
    before = set((cache_dir() / "activations").glob("*")) if (
        cache_dir() / "activations").exists() else set()
    exp = _parse(_experiment(tmp_path, model=small, name="small"), tmp_path)
    with pytest.raises(ExperimentCheckError, match="fit_transform = 'mood_train'.*no torchvision "
                       "Normalize step"):
        oodbench.run_experiment(exp, progress=False)
    after = set((cache_dir() / "activations").glob("*")) if (
        cache_dir() / "activations").exists() else set()
    assert after == before


def test_every_fit_transform_names_its_source() -> None:
    assert FIT_TRANSFORMS["eval"].build == ""
    for entry in FIT_TRANSFORMS.values():
        assert entry.source and entry.description


def test_mood_train_posterize_at_zero_bits_is_black_not_an_error():
    """RandAugment's PosterizeIncreasing reaches 0 bits at level 10; Pillow 10+ raises there,
    older Pillow (MOOD's) gave a black image: the mood_train transform keeps the latter."""
    from PIL import Image

    from oodbench.models.preprocessing import posterize_zero_bits_black

    img = Image.new("RGB", (5, 4), (200, 100, 7))
    assert list(posterize_zero_bits_black(img, 0).getdata()) == [(0, 0, 0)] * 20
    assert list(posterize_zero_bits_black(img, 1).getdata()) == [(128, 0, 0)] * 20
    assert posterize_zero_bits_black(img, 8) is img


def test_the_mood_train_transform_uses_the_black_posterize():
    """The mood_train transform's RandAugment posterizes through ``posterize_zero_bits_black``:
    driven to level 10 (0 bits kept), its op gives a black image where timm's own op raises on
    Pillow 10+."""
    from types import SimpleNamespace

    from PIL import Image
    from torchvision import transforms as T

    from oodbench.models.preprocessing import mood_train_transform, posterize_zero_bits_black

    model = SimpleNamespace(transform=T.Compose([T.ToTensor(), T.Normalize([0.5] * 3, [0.5] * 3)]))
    ops = [op for step in mood_train_transform(model).transforms for op in getattr(step, "ops", [])]
    posterize = [op for op in ops if op.name == "PosterizeIncreasing"]
    assert len(posterize) == 1 and posterize[0].aug_fn is posterize_zero_bits_black
    op = posterize[0]
    op.prob, op.magnitude, op.magnitude_std = 1.0, 10, 0  # level 10: 4 - int(10 / 10 * 4) = 0 bits
    out = op(Image.new("RGB", (6, 6), (200, 100, 7)))
    assert list(out.getdata()) == [(0, 0, 0)] * 36
