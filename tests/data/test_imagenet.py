"""ImageNet class information read from timm's ``_info`` files."""

from __future__ import annotations

from pathlib import Path

import pytest

from oodbench.data import imagenet
from oodbench.errors import InvalidInputError, UnknownNameError

WORDNET_NOUNS = Path("/usr/share/wordnet/data.noun")


def test_imagenet1k_wnids_are_the_standard_1000_in_sorted_order() -> None:
    wnids = imagenet.imagenet1k_wnids()
    assert len(wnids) == len(set(wnids)) == 1000
    assert wnids == sorted(wnids)  # the class-index order of torchvision/timm
    assert wnids[0] == "n01440764" and wnids[-1] == "n15075141"  # tench ... toilet tissue
    assert imagenet.imagenet1k_class_names()[0] == "tench"


def test_imagenet1k_wnids_match_the_shared_validation_labels(imagenet_val_1300: Path) -> None:
    # synset_words.txt of the shared data: "<wnid> <names>" per class index
    lines = (imagenet_val_1300 / "synset_words.txt").read_text().splitlines()
    shared = [line.split()[0] for line in lines if line.strip()]
    assert shared == imagenet.imagenet1k_wnids()


def test_imagenet21k_variants() -> None:
    goog = imagenet.imagenet21k_wnids()
    assert len(goog) == len(set(goog)) == 21843  # the fall11 release
    assert len(imagenet.imagenet21k_wnids("22k")) == 21841  # winter21 dropped two synsets
    assert all(imagenet.is_wnid(w) for w in goog)
    with pytest.raises(UnknownNameError, match="goog"):
        imagenet.imagenet21k_wnids("google")


def test_lemmas_and_definitions() -> None:
    assert imagenet.lemmas("n01440764") == "tench, Tinca tinca"
    assert imagenet.class_name("n02084071") == "dog"
    assert imagenet.definition("n01440764").startswith("freshwater dace-like game fish")
    assert imagenet.lemmas("n99999999") == "" and imagenet.class_name("n99999999") == "n99999999"


@pytest.mark.skipif(not WORDNET_NOUNS.is_file(), reason="WordNet 3.0 (wordnet-base) not installed")
def test_wnids_are_wordnet_offsets() -> None:
    # the gloss of offset 01440764 in WordNet 3.0 is timm's definition of n01440764
    line = next(
        ln for ln in WORDNET_NOUNS.read_text(errors="replace").splitlines()
        if ln.startswith("01440764 ")
    )
    assert line.split(" | ", 1)[1].strip() == imagenet.definition("n01440764")


def test_wnid_helpers() -> None:
    assert imagenet.offset_to_wnid(1440764) == imagenet.offset_to_wnid("01440764") == "n01440764"
    assert imagenet.wnid_to_offset("n01440764") == 1440764
    assert imagenet.is_wnid("n01440764") and not imagenet.is_wnid("n0144076")
    with pytest.raises(InvalidInputError, match="not WordNet noun ids"):
        imagenet.check_wnids(["n01440764", "tench"])
