"""Error messages: unknown names suggest the closest valid ones."""

from __future__ import annotations

import difflib

from oodbench.errors import UnknownNameError, closest_names


def test_short_lists_are_printed_whole():
    err = UnknownNameError("detector", "mps", ["msp", "energy", "knn"])
    assert str(err) == "unknown detector 'mps'. Did you mean 'msp'? Valid names: energy, knn, msp"


def test_long_lists_give_the_five_most_similar_names_best_first():
    valid = [f"net{i}_{size}" for i in range(30) for size in ("small", "base", "large")]
    valid += ["resnet50", "resnet50d", "resnet101", "seresnet50"]
    err = UnknownNameError("model", "resnet5", valid)
    assert err.close == ["resnet50", "resnet50d", "seresnet50", "resnet101", "net5_base"]
    assert str(err) == ("unknown model 'resnet5'. Did you mean 'resnet50', 'resnet50d', "
                        "'seresnet50', 'resnet101', 'net5_base'? (the 5 closest of 94 valid names)")


def test_closest_names_ranks_prefix_then_substring_then_similarity():
    names = ["b_resnet", "resnet_a", "zzzz", "resnex"]
    assert closest_names("resnet", names, 4) == ["resnet_a", "b_resnet", "resnex", "zzzz"]
    # the similarity order is difflib's ratio
    ratios = {n: difflib.SequenceMatcher(None, "resnet", n).ratio() for n in ("resnex", "zzzz")}
    assert ratios["resnex"] > ratios["zzzz"]


def test_a_transposed_typo_ranks_its_anagram_first():
    # 'mps' is one substitution from 'mos' and one swap from 'msp': the swap is the typo
    valid = ["mos", "msp", "rp_msp", "vra_plus", "dml"] + [f"detector{i}" for i in range(40)]
    assert UnknownNameError("detector", "mps", valid).close[:2] == ["msp", "mos"]


def test_typo_distance_counts_a_swap_as_one_edit():
    from oodbench.errors import typo_distance

    assert typo_distance("mps", "msp") == 1
    assert typo_distance("mps", "mos") == 1
    assert typo_distance("kitten", "sitting") == 3  # Levenshtein's classic case, no swaps
    assert typo_distance("ca", "abc") == 3  # OSA: a swapped pair is not edited again
    assert typo_distance("", "abc") == 3 and typo_distance("abc", "abc") == 0
