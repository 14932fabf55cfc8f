"""Cache management: list_cache, remove, verify."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from oodbench.errors import CacheError, InvalidInputError, UnknownNameError
from oodbench.extract import extract, list_cache, remove, resolve_key, verify
from tests.extract._toy import RandomImages, TinyNet


def _two_entries():
    a = extract(TinyNet(), RandomImages(5, name="five"), progress=False)
    b = extract(TinyNet(), RandomImages(3, name="three", corrupt=[0]), progress=False)
    return a, b


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_list_cache_describes_every_entry():
    a, b = _two_entries()
    entries = {e["key"]: e for e in list_cache()}
    assert set(entries) == {a.meta["cache_key"], b.meta["cache_key"]}
    five, three = entries[a.meta["cache_key"]], entries[b.meta["cache_key"]]
    assert five["model"] == "test:tinynet-3-8" and five["source"] == "five"
    assert (five["n"], five["n_source"], five["skipped"]) == (5, 5, 0)
    assert (three["n"], three["n_source"], three["skipped"]) == (2, 3, 1)
    assert five["complete"] and three["complete"]
    assert five["size_bytes"] == sum(p.stat().st_size for p in Path(five["path"]).rglob("*"))
    assert five["capture"] == ["features", "logits"] and five["precision"] == "float32"


def test_list_cache_on_an_empty_cache():
    assert list_cache() == [] and verify() == []


def test_an_interrupted_entry_is_listed_as_incomplete():
    class Stop(TinyNet):
        def forward_feature_map(self, x):
            if self.calls == 2:
                raise KeyboardInterrupt
            return super().forward_feature_map(x)

    with pytest.raises(KeyboardInterrupt):
        extract(Stop(), RandomImages(6), batch_size=2, shard_size=2, progress=False)
    (entry,) = list_cache()
    assert not entry["complete"] and (entry["shards_done"], entry["n_shards"]) == (2, 3)
    assert entry["n"] == 4
    (report,) = verify()
    assert report["ok"] and not report["complete"]


def test_verify_finds_damaged_and_missing_files():
    acts = extract(TinyNet(), RandomImages(4), progress=False)
    key, folder = acts.meta["cache_key"], Path(acts.meta["cache_path"])
    assert verify(key) == [{"key": key, "complete": True, "ok": True, "problems": []}]
    del acts  # release the memory maps before changing the files
    data = bytearray((folder / "features.npy").read_bytes())
    data[-2] ^= 0x01
    (folder / "features.npy").write_bytes(bytes(data))
    (folder / "labels.npy").unlink()
    (report,) = verify(key[:10])
    assert not report["ok"]
    assert sorted(report["problems"]) == [
        "features.npy does not match its checksum",
        "labels.npy is missing",
    ]


def test_remove_by_key_or_unique_prefix():
    a = extract(TinyNet(), RandomImages(2), progress=False).meta["cache_key"]
    b = extract(TinyNet(seed=3), RandomImages(2), progress=False).meta["cache_key"]
    prefix = a[: len(os.path.commonprefix([a, b])) + 1]
    assert resolve_key(prefix) == a
    assert remove(prefix) == a
    assert [e["key"] for e in list_cache()] == [b]
    with pytest.raises(UnknownNameError, match="cache entry"):
        remove(a)
    with pytest.raises(InvalidInputError, match="non-empty prefix"):
        remove("")
    assert remove(b) == b and list_cache() == []


def test_an_ambiguous_prefix_is_refused(cache_root: Path):
    for key in ("abc1", "abc2"):
        (cache_root / "activations" / key).mkdir(parents=True)
    with pytest.raises(InvalidInputError, match="matches 2 entries"):
        remove("abc")
    assert {e["key"] for e in list_cache()} == {"abc1", "abc2"}
    assert all(not r["ok"] and r["problems"] == ["manifest.json is missing"] for r in verify())


def test_a_truncated_final_array_is_a_cache_error_naming_the_fix():
    acts = extract(TinyNet(), RandomImages(4), progress=False)
    key, logits = acts.meta["cache_key"], Path(acts.meta["cache_path"]) / "logits.npy"
    del acts
    logits.write_bytes(logits.read_bytes()[:-8])
    with pytest.raises(CacheError, match=f"logits.npy cannot be read.*oodbench cache rm {key[:12]}"):
        extract(TinyNet(), RandomImages(4), progress=False)
    remove(key)
    model = TinyNet()
    assert not extract(model, RandomImages(4), progress=False).meta["cache_hit"]
    assert model.calls == 1


def _flip_one_value(path: Path, row: int) -> None:
    """Change one float of a .npy file in place: same size, same shape, other numbers."""
    array = np.load(path, mmap_mode="r+")
    array[row, 0] = array[row, 0] + 1.0
    array.flush()
    del array


def test_a_same_size_corruption_is_caught_on_use_and_repaired_on_request(cache_root: Path):
    source = RandomImages(8)
    clean = extract(TinyNet(), source, batch_size=4, progress=False)
    key, folder = clean.meta["cache_key"], Path(clean.meta["cache_path"])
    expected = np.array(clean.logits)
    size = (folder / "logits.npy").stat().st_size
    del clean
    _flip_one_value(folder / "logits.npy", row=5)
    assert (folder / "logits.npy").stat().st_size == size
    model = TinyNet()
    with pytest.raises(CacheError) as err:
        extract(model, source, batch_size=4, progress=False)
    assert f"cache entry {key}" in str(err.value)
    assert "logits.npy does not match its checksum" in str(err.value)
    assert "repair=True (--repair" in str(err.value) and model.calls == 0
    repaired = extract(model, source, batch_size=4, progress=False, repair=True)
    assert model.calls == 2 and not repaired.meta["cache_hit"]
    np.testing.assert_array_equal(repaired.logits, expected)
    assert verify(key)[0]["ok"]


def test_hits_hash_each_file_once_per_process(cache_root: Path, monkeypatch: pytest.MonkeyPatch):
    from oodbench.extract import store

    source = RandomImages(4)
    extract(TinyNet(), source, progress=False)
    hashed: list[str] = []
    real = store.file_sha256
    monkeypatch.setattr(store, "file_sha256", lambda path: hashed.append(path.name) or real(path))
    store._VERIFIED.clear()  # as in a new process
    for _ in range(3):
        extract(TinyNet(), source, capture=("logits",), progress=False)
    assert sorted(hashed) == ["ids.npy", "labels.npy", "logits.npy", "source_indices.npy"]
    monkeypatch.setenv("OODBENCH_CACHE_VERIFY", "0")
    store._VERIFIED.clear()
    extract(TinyNet(), source, progress=False)
    assert len(hashed) == 4


def test_an_unwritable_cache_is_a_cache_error_naming_the_fix(tmp_path: Path, monkeypatch):
    (tmp_path / "a_file").write_text("not a folder")
    monkeypatch.setenv("OODBENCH_CACHE", str(tmp_path / "a_file" / "cache"))
    with pytest.raises(CacheError, match="OODBENCH_CACHE at a writable folder.*cache=False"):
        extract(TinyNet(), RandomImages(2), progress=False)
    assert len(extract(TinyNet(), RandomImages(2), cache=False, progress=False)) == 2


def test_a_second_writer_waits_for_the_first_and_gets_a_hit(cache_root: Path):
    source = RandomImages(6)
    first = TinyNet(delay=0.2)
    worker = threading.Thread(
        target=extract, args=(first, source), kwargs={"batch_size": 2, "progress": False}
    )
    worker.start()
    deadline = time.monotonic() + 60
    while not list(cache_root.glob("activations/*/manifest.json")) and time.monotonic() < deadline:
        time.sleep(0.01)
    second = TinyNet()
    acts = extract(second, source, batch_size=2, progress=False)  # blocks on the entry's lock
    worker.join()
    assert first.calls == 3 and second.calls == 0 and acts.meta["cache_hit"]


def test_a_fresh_extraction_does_not_hash_its_arrays_twice(cache_root: Path,
                                                           monkeypatch: pytest.MonkeyPatch):
    from oodbench.extract import store

    hashed: list[str] = []
    real = store.file_sha256
    monkeypatch.setattr(store, "file_sha256", lambda path: hashed.append(path.name) or real(path))
    extract(TinyNet(), RandomImages(4), progress=False)
    assert "logits.npy" in hashed  # hashed when the final array was written ...
    assert sorted(hashed) == sorted(set(hashed))  # ... and not read back to be hashed again
