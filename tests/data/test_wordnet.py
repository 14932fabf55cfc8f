"""The committed WordNet hierarchy of the ImageNet classes."""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

import pytest

from oodbench.data.imagenet import imagenet1k_wnids, imagenet21k_wnids
from oodbench.data.wordnet import HIERARCHY_FILE, Hierarchy, load_hierarchy
from oodbench.errors import DataError, MissingDataError

REPO = Path(__file__).resolve().parents[2]
WORDNET_NOUNS = Path("/usr/share/wordnet/data.noun")


def test_committed_file_is_small_and_covers_every_imagenet_class() -> None:
    assert HIERARCHY_FILE.stat().st_size < 2_000_000
    h = load_hierarchy()
    classes = set(imagenet1k_wnids()) | set(imagenet21k_wnids())
    assert classes <= set(h.parents)
    # every parent is itself in the file, and only "entity" has none
    assert all(p in h for ps in h.parents.values() for p in ps)
    assert [w for w, ps in h.parents.items() if not ps] == ["n00001740"]


def test_known_hypernyms() -> None:
    h = load_hierarchy()
    chihuahua = h.ancestors("n02085620")
    # dog, canine, carnivore, mammal, animal, organism, entity
    for wnid in ("n02084071", "n02083346", "n02075296", "n01861778", "n00015388", "n00004475",
                 "n00001740"):
        assert wnid in chihuahua
    assert "n02085620" not in chihuahua
    assert "n02129165" in h.parents["n01322898"]  # lion cub -> lion
    assert h.ancestors("n99999999") == frozenset()


def test_dog_descendants_in_imagenet1k_are_classes_151_to_268() -> None:
    k1 = imagenet1k_wnids()
    dogs = load_hierarchy().descendants("n02084071", within=k1)
    assert sorted(k1.index(w) for w in dogs) == list(range(151, 269))


def test_related_matches_a_naive_recursive_closure() -> None:
    h = load_hierarchy()

    @cache
    def above(w: str) -> frozenset[str]:
        out: set[str] = set()
        for p in h.parents.get(w, ()):
            out |= {p} | above(p)
        return frozenset(out)

    targets = set(imagenet1k_wnids())
    candidates = [w for w in imagenet21k_wnids() if w not in targets]
    expected = {}
    for c in candidates:
        if any(c in above(t) for t in targets):
            expected[c] = "ancestor"
        elif above(c) & targets:
            expected[c] = "descendant"
    got = h.related(candidates, targets)
    assert got == expected
    assert got["n02084071"] == "ancestor" and got["n01322898"] == "descendant"
    assert "n12139793" not in got  # salt reed grass: no ImageNet-1k relative


def test_from_file_small_graphs(tmp_path: Path) -> None:
    diamond = tmp_path / "d.tsv"
    diamond.write_text("# comment\nr\t\na\tr\nb\tr\nc\ta,b\nd\tc,b\n")
    h = Hierarchy.from_file(diamond)
    assert h.ancestors("d") == {"c", "a", "b", "r"}
    assert h.descendants("a") == {"c", "d"}
    cyclic = tmp_path / "c.tsv"
    cyclic.write_text("a\tb\nb\ta\n")
    with pytest.raises(DataError, match="cycle"):
        Hierarchy.from_file(cyclic).ancestors("a")
    bad = tmp_path / "b.tsv"
    bad.write_text("a b\n")
    with pytest.raises(DataError, match=":1: expected"):
        Hierarchy.from_file(bad)
    with pytest.raises(MissingDataError, match="make_imagenet21k_hierarchy"):
        Hierarchy.from_file(tmp_path / "absent.tsv")


@pytest.mark.skipif(not WORDNET_NOUNS.is_file(), reason="WordNet 3.0 (wordnet-base) not installed")
def test_committed_file_is_what_the_script_generates(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "make_hierarchy", REPO / "scripts" / "make_imagenet21k_hierarchy.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "parents.tsv"
    assert module.main(["--wordnet", str(WORDNET_NOUNS), "--out", str(out)]) == 0
    assert out.read_bytes() == HIERARCHY_FILE.read_bytes()
