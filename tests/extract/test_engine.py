"""extract(): values, cache hits, cache keys and bad input, on a tiny conv net and random images."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from oodbench.errors import (
    ClassCountMismatchError,
    EmptyInputError,
    InvalidInputError,
    NonFiniteError,
    UnknownNameError,
)
from oodbench.extract import SkippedImagesWarning, extract
from tests._tolerance import U32, assert_within, dot_error
from tests.extract._toy import RandomImages, TinyNet, forward_bounds, reference_forward

ALL = ("logits", "features", "feature_map")


def test_arrays_equal_a_direct_forward_pass():
    model, source = TinyNet(), RandomImages(10)
    acts = extract(model, source, capture=ALL, batch_size=4, progress=False)
    ref = reference_forward(TinyNet(), source, range(10))
    bounds = forward_bounds(TinyNet(), source, range(10))  # batches of 4 against one by one
    for name in ALL:
        got = getattr(acts, name)
        assert got.dtype == np.float32
        assert_within(got, ref[name], bounds[name], name)
    np.testing.assert_array_equal(acts.labels, source.labels)
    np.testing.assert_array_equal(acts.ids, source.ids)
    np.testing.assert_array_equal(acts.source_indices, np.arange(10))
    # top-two logit margins >= 0.2 here, far above the forward passes' rounding bound
    np.testing.assert_array_equal(acts.predictions, ref["logits"].argmax(1))
    assert acts.source is source


def test_linear_head_reproduces_the_logits():
    model = TinyNet(num_classes=5)
    acts = extract(model, RandomImages(9, num_classes=5), batch_size=4, progress=False)
    np.testing.assert_array_equal(acts.head_weight, model.fc.weight.detach().numpy())
    np.testing.assert_array_equal(acts.head_bias, model.fc.bias.detach().numpy())
    recomputed = acts.features.astype(np.float64) @ acts.head_weight.T.astype(np.float64)
    # the logits are the float32 head: within gamma(D + 1) of |f| |W|^T + |b| of the float64 one
    ones = np.ones((len(acts), 1))
    bound = dot_error(np.c_[acts.features, ones], np.c_[acts.head_weight, acts.head_bias], U32)
    assert_within(recomputed + acts.head_bias, acts.logits, bound)


def test_arrays_are_memory_mapped_from_the_cache(cache_root: Path):
    acts = extract(TinyNet(), RandomImages(6), capture=ALL, progress=False)
    for name in ("logits", "features", "feature_map", "labels", "ids", "source_indices"):
        array = getattr(acts, name)
        assert isinstance(array, np.memmap), name
        assert not array.flags.writeable
    folder = Path(acts.meta["cache_path"])
    assert folder.parent == cache_root / "activations"
    assert folder.name == acts.meta["cache_key"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["complete"] and manifest["rows"] == 6
    assert not (folder / "shards").exists()


def test_second_call_is_a_cache_hit_without_a_forward_pass():
    source = RandomImages(12)
    first_model = TinyNet()
    first = extract(first_model, source, batch_size=4, progress=False)
    assert first_model.calls == 3 and not first.meta["cache_hit"]
    second_model = TinyNet()  # same weights, new object
    second = extract(second_model, source, batch_size=5, progress=False)  # batch size: no key
    assert second_model.calls == 0
    assert second.meta["cache_hit"] and second.meta["cache_key"] == first.meta["cache_key"]
    np.testing.assert_array_equal(second.logits, first.logits)
    np.testing.assert_array_equal(second.features, first.features)
    assert second.meta["timings"]["extraction"]["images"] == 12


def test_meta_records_provenance():
    model, source = TinyNet(), RandomImages(5)
    meta = extract(model, source, progress=False).meta
    assert meta["model"] == model.spec
    assert meta["weights_digest"] == model.weights_digest()
    assert meta["source"] == source.name and meta["n_source"] == 5
    assert meta["source_fingerprint"] == source.fingerprint()
    assert meta["transform"] == repr(model.transform)
    assert meta["capture"] == ["logits", "features"]
    assert meta["precision"] == "float32" and meta["device"] == "cpu"
    assert meta["skipped"] == []
    assert set(meta["timings"]) >= {"data_s", "forward_s", "write_s", "total_s", "images"}


def _key(model: TinyNet, source: RandomImages, **kw) -> str:
    return extract(model, source, progress=False, **kw).meta["cache_key"]


def test_cache_key_follows_what_changes_the_numbers():
    base = _key(TinyNet(), RandomImages(4))
    assert _key(TinyNet(), RandomImages(4), batch_size=3, shard_size=2) == base
    changed = {
        "weights": _key(TinyNet(seed=1), RandomImages(4)),
        "source": _key(TinyNet(), RandomImages(4, seed=1)),
        "capture": _key(TinyNet(), RandomImages(4), capture=ALL),
        "precision": _key(TinyNet(), RandomImages(4), amp="bf16"),
    }
    assert len({base, *changed.values()}) == 5, changed
    model = TinyNet()
    model.transform.transforms[1].std = [0.3] * 3  # another preprocessing
    assert _key(model, RandomImages(4)) != base


def test_feature_map_dtype_enters_the_key_only_when_the_map_is_captured():
    src = RandomImages(4)
    assert _key(TinyNet(), src, feature_map_dtype="float16") == _key(TinyNet(), src)
    half = extract(TinyNet(), src, capture=ALL, feature_map_dtype="float16", progress=False)
    full = extract(TinyNet(), src, capture=ALL, progress=False)
    assert half.meta["cache_key"] != full.meta["cache_key"]
    assert half.feature_map.dtype == np.float16 and half.logits.dtype == np.float32
    # float16 keeps 11 significant bits: each entry rounds by at most 2^-11 = 4.9e-4 relative
    # (no entry is below float16's normal range, 6e-5, by more than its 6e-8 spacing)
    np.testing.assert_allclose(half.feature_map, full.feature_map, rtol=1e-3, atol=1e-7)
    # the same forward passes in this process (the map's storage dtype changes nothing else)
    np.testing.assert_array_equal(half.logits, full.logits)


def test_float16_feature_map_overflow_is_an_error():
    model = TinyNet()
    with torch.no_grad():
        model.body[2].weight.mul_(1e6)
    with pytest.raises(NonFiniteError, match="feature_map_dtype='float32'"):
        extract(model, RandomImages(3), capture=ALL, feature_map_dtype="float16", progress=False)


def test_cache_false_writes_nothing_and_gives_the_same_arrays(cache_root: Path):
    source = RandomImages(7, corrupt=[3])
    with pytest.warns(SkippedImagesWarning):
        memory = extract(TinyNet(), source, capture=ALL, batch_size=3, cache=False, progress=False)
    assert not cache_root.exists()
    assert memory.meta["cache_path"] is None and len(memory.meta["skipped"]) == 1
    with pytest.warns(SkippedImagesWarning):
        cached = extract(TinyNet(), source, capture=ALL, batch_size=3, progress=False)
    for name in (*ALL, "labels", "ids", "source_indices"):
        np.testing.assert_array_equal(getattr(memory, name), getattr(cached, name))


def test_unreadable_images_are_skipped_counted_and_reported(cache_root: Path):
    source = RandomImages(10, corrupt=[2, 7])
    with pytest.warns(SkippedImagesWarning, match="skipped 2 of 10 images") as record:
        acts = extract(TinyNet(), source, batch_size=4, shard_size=4, progress=False)
    assert len([w for w in record if w.category is SkippedImagesWarning]) == 1
    keep = [0, 1, 3, 4, 5, 6, 8, 9]
    np.testing.assert_array_equal(acts.source_indices, keep)
    np.testing.assert_array_equal(acts.labels, source.labels[keep])
    assert_within(acts.logits, reference_forward(TinyNet(), source, keep)["logits"],
                  forward_bounds(TinyNet(), source, keep)["logits"])  # batches against one by one
    assert [s["id"] for s in acts.meta["skipped"]] == ["random:2", "random:7"]
    assert all("CorruptImageError" in s["reason"] for s in acts.meta["skipped"])
    manifest = json.loads((Path(acts.meta["cache_path"]) / "manifest.json").read_text())
    listed = [s["index"] for shard in manifest["shards"].values() for s in shard["skipped"]]
    assert sorted(listed) == [2, 7]
    with pytest.warns(SkippedImagesWarning):  # a cache hit still says what is missing
        hit = extract(TinyNet(), source, batch_size=4, progress=False)
    assert hit.meta["cache_hit"] and len(hit.meta["skipped"]) == 2


def test_a_shard_with_no_readable_image_is_fine():
    source = RandomImages(9, corrupt=[3, 4, 5])
    with pytest.warns(SkippedImagesWarning):
        acts = extract(TinyNet(), source, batch_size=2, shard_size=3, progress=False)
    np.testing.assert_array_equal(acts.source_indices, [0, 1, 2, 6, 7, 8])


def test_no_readable_image_at_all_is_an_empty_input_error():
    with pytest.raises(EmptyInputError, match="none of the 3 images of source 'broken'"):
        extract(TinyNet(), RandomImages(3, corrupt=[0, 1, 2], name="broken"), progress=False)


def test_empty_source_is_an_error_naming_it():
    with pytest.raises(EmptyInputError, match="source 'nothing'"):
        extract(TinyNet(), RandomImages(0, name="nothing"), progress=False)


def test_labels_beyond_the_model_classes_are_an_error_naming_the_fix():
    source = RandomImages(4, labels=np.array([0, 1, 4, -1]), name="wrong")
    with pytest.raises(ClassCountMismatchError, match="source 'wrong' has labels up to 4.*-1"):
        extract(TinyNet(num_classes=3), source, progress=False)


def test_logit_width_must_match_num_classes():
    model = TinyNet(num_classes=3)
    model.num_classes = 4
    with pytest.raises(ClassCountMismatchError, match="num_classes=4"):
        extract(model, RandomImages(3), progress=False)


class _NaNOnThirdBatch(TinyNet):
    def head(self, features: torch.Tensor) -> torch.Tensor:
        logits = super().head(features)
        if self.calls == 3:
            logits[1] = float("nan")
        return logits


def test_nan_logits_name_the_samples_and_keep_completed_shards(cache_root: Path):
    source = RandomImages(12)
    with pytest.raises(NonFiniteError, match=r"\['random:5'\].*check the checkpoint"):
        extract(_NaNOnThirdBatch(), source, batch_size=2, shard_size=4, progress=False)
    (folder,) = (cache_root / "activations").iterdir()
    manifest = json.loads((folder / "manifest.json").read_text())
    assert sorted(manifest["shards"]) == ["0"] and not manifest["complete"]
    with pytest.raises(NonFiniteError, match="amp='off'"):
        extract(_NaNOnThirdBatch(), source, batch_size=2, amp="bf16", progress=False)


def test_bf16_autocast_on_cpu_is_close_to_float32():
    source = RandomImages(6)
    full = extract(TinyNet(), source, progress=False)
    bf16 = extract(TinyNet(), source, amp="bf16", progress=False)
    assert bf16.meta["precision"] == "bfloat16" and bf16.logits.dtype == np.float32
    # bfloat16 keeps 8 significant bits (2^-9 = 2e-3 relative per rounding); through two
    # convolutions of 27 and 72 terms the logits (|z| < 2) move by ~1e-2; a float32 pass
    # that ignored the autocast is caught by the precision above, a broken one by 0.1
    np.testing.assert_allclose(bf16.logits, full.logits, atol=0.1)


def test_bad_options_are_named():
    with pytest.raises(UnknownNameError, match="feature_mapp"):
        extract(TinyNet(), RandomImages(2), capture=("feature_mapp",), progress=False)
    with pytest.raises(UnknownNameError, match="amp setting 'half'"):
        extract(TinyNet(), RandomImages(2), amp="half", progress=False)
    with pytest.raises(UnknownNameError, match="feature_map_dtype"):
        extract(TinyNet(), RandomImages(2), feature_map_dtype="int8", progress=False)
    with pytest.raises(InvalidInputError, match="batch_size"):
        extract(TinyNet(), RandomImages(2), batch_size=0, progress=False)
    with pytest.raises(InvalidInputError, match="num_workers"):
        extract(TinyNet(), RandomImages(2), num_workers=-2, progress=False)
    with pytest.raises(InvalidInputError, match="shard_size"):
        extract(TinyNet(), RandomImages(2), shard_size=0, progress=False)


def test_train_mode_is_restored_and_eval_mode_used():
    model = TinyNet()
    model.train()
    seen = []
    model.body.register_forward_pre_hook(lambda m, args: seen.append(m.training))
    extract(model, RandomImages(3), cache=False, progress=False)
    assert seen == [False] and model.training and model.body.training


def test_progress_bar_runs(capsys: pytest.CaptureFixture[str]):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        extract(TinyNet(), RandomImages(5), batch_size=2, progress=True)
    # not a terminal under pytest: one line per stage, on stderr (issue 23), with the speed
    assert "img/s" in capsys.readouterr().err
