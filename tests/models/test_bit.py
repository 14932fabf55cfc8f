"""The ``bit:`` family reads checkpoints of the official BiT PyTorch code (gradnorm_ood /
large_scale_ood ``resnetv2.py``), written here from a re-statement of that module with random
values: every tensor lands where the official forward uses it, and wrong checkpoints are named."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from oodbench.errors import (
    ClassCountMismatchError,
    InvalidInputError,
    MissingDataError,
    UnknownNameError,
)
from oodbench.models import load
from oodbench.models.bit import official_key
from tests.models.official_nets import BiT, randomise

R50 = (3, 4, 6, 3)


def _save(net: torch.nn.Module, path: Path) -> Path:
    """The layout of large_scale_ood finetune.py's torch.save: step, the DataParallel state dict
    ("module." prefix) under "model", the optimiser's state."""
    torch.save({"step": 3, "model": {f"module.{k}": v for k, v in net.state_dict().items()},
                "optim": {"state": {}, "param_groups": [{"lr": 0.003, "momentum": 0.9,
                                                         "params": [0, 1]}]}}, path)
    return path


@pytest.fixture(scope="module")
def mos_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[BiT, Path]:
    """An official BiT-S-R50x1 with MOS's head (1000 classes + 8 groups), random values."""
    net = randomise(BiT(R50, 1, 1008), seed=0)
    return net, _save(net, tmp_path_factory.mktemp("bit") / "bit.pth.tar")


def test_every_official_tensor_lands_where_the_official_forward_uses_it(mos_checkpoint) -> None:
    official, path = mos_checkpoint
    clf = load("bit:BiT-S-R50x1", weights=path, num_classes=1008)
    loaded = {official_key(k): v for k, v in clf.state_dict().items()}
    assert loaded.keys() == official.state_dict().keys()
    for key, value in official.state_dict().items():
        assert torch.equal(loaded[key], value.reshape(loaded[key].shape)), key
    # the official forward against the split, in float64 (the two weight standardisations are
    # different kernels: float32 leaves ~1e-5 of the scale; float64 ~1e-14, so 1e-10 is slack
    # for rounding yet far below the order-1 change any misplaced tensor makes)
    official, clf = official.double(), clf.double()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with torch.no_grad():
        got = clf.forward_all(x, ("logits", "features", "feature_map"))
        fmap = official.body(official.root(x))  # block4's output, the map RankFeat edits
        wanted = {"feature_map": fmap, "features": official.before_head(fmap).flatten(1),
                  "logits": official(x)}
    for name, ref in wanted.items():
        assert (got[name] - ref).abs().max() <= 1e-10 * ref.abs().max(), name


def test_r101x1_has_exactly_the_official_keys_and_shapes() -> None:
    """BiT-S-R101x1, the rows' backbone: the official module's names and shapes (built on the
    meta device: no memory) are exactly the loader's, through :func:`official_key`."""
    with torch.device("meta"):
        official = {k: tuple(v.shape) for k, v in BiT((3, 4, 23, 3), 1, 1000).state_dict().items()}
    clf = load("bit:BiT-S-R101x1", pretrained=False)
    ours = {official_key(k): tuple(v.shape) for k, v in clf.state_dict().items()}
    official["head.conv.weight"] = official["head.conv.weight"][:2]  # the 1x1 conv as a Linear
    assert ours == official
    assert clf.num_classes == 1000 and len(clf.class_wnids) == 1000


def test_a_flat_checkpoint_for_the_group_head_names_its_size(tmp_path: Path) -> None:
    path = _save(randomise(BiT(R50, 1, 1000), seed=1), tmp_path / "flat.pth.tar")
    with pytest.raises(ClassCountMismatchError, match="head has 1000 outputs: pass num_classes=1000"):
        load("bit:BiT-S-R50x1", weights=path, num_classes=1008)


def test_a_checkpoint_of_another_depth_names_the_missing_units(mos_checkpoint) -> None:
    _, path = mos_checkpoint
    with pytest.raises(InvalidInputError, match=r"missing: body\.block3\.unit07\.gn1\.weight"):
        load("bit:BiT-S-R101x1", weights=path, num_classes=1008)


def test_a_checkpoint_in_timm_layout_is_named_unexpected(tmp_path: Path) -> None:
    clf = load("bit:BiT-S-R50x1", pretrained=False)
    path = tmp_path / "timm.pth"
    torch.save(clf.model.state_dict(), path)  # timm's names: stem.conv.weight, stages.0...
    with pytest.raises(InvalidInputError, match=r"official BiT \(bit:BiT-S-R50x1\).*unexpected: "
                                                r"stem\.conv\.weight"):
        load("bit:BiT-S-R50x1", weights=path)


def test_no_weights_is_a_clear_error_and_names_are_the_official_list() -> None:
    with pytest.raises(MissingDataError, match="weights=PATH"):
        load("bit:BiT-S-R101x1")
    with pytest.raises(UnknownNameError, match="Did you mean 'BiT-S-R101x3', 'BiT-S-R101x1'"):
        load("bit:BiT-S-R101", pretrained=False)


def test_the_split_satisfies_the_classifier_identities() -> None:
    """logits = features @ W.T + b, pool(feature map) = features, forward_all = the single
    methods, eval mode (tests/models/checks.py), at random init."""
    from tests.models.checks import assert_classifier_consistent, batch

    clf = load("bit:BiT-S-R50x1", pretrained=False, num_classes=12)
    out = assert_classifier_consistent(clf, batch(64, n=2), reference=None)
    assert out["feature_map"].shape == (2, 2048, 2, 2) and out["features"].shape == (2, 2048)
