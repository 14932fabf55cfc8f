import pytest

from oodbench.data.class_groups import hierarchy_groups, root_path
from oodbench.data.imagenet import imagenet1k_wnids
from oodbench.data.wordnet import Hierarchy, load_hierarchy
from oodbench.errors import InvalidInputError

#        root
#       /    \
#   animal   thing
#   /   \       \
#  dog  cat    tool - hammer, saw
TOY = Hierarchy({
    "root": (), "animal": ("root",), "thing": ("root",), "dog": ("animal",), "cat": ("animal",),
    "tool": ("thing",), "hammer": ("tool",), "saw": ("tool",),
})


def test_toy_tree_splits_the_largest_group_first():
    wnids = ["dog", "hammer", "cat", "saw"]
    assert hierarchy_groups(wnids, 1, TOY) == [[0, 1, 2, 3]]
    assert hierarchy_groups(wnids, 2, TOY) == [[0, 2], [1, 3]]  # animal | thing
    # 3 groups: both have 2 classes; the first (animal) splits into dog | cat
    assert hierarchy_groups(wnids, 3, TOY) == [[0], [1, 3], [2]]
    assert hierarchy_groups(wnids, 10, TOY) == [[0], [1], [2], [3]]  # never more than classes


def test_too_many_children_are_merged_back_to_the_closest_relative():
    # root splits into 3 at once (animal: dog, cat; tool: hammer): for 2 groups the smallest
    # (tool) cannot merge with a sibling closer than the root, so it joins the smaller of the rest
    many = Hierarchy({**TOY.parents, "fish": ("animal",), "tool": ("root",)})
    groups = hierarchy_groups(["dog", "cat", "fish", "hammer", "saw"], 2, many)
    assert groups == [[0, 1, 2], [3, 4]]


def test_a_chain_moves_the_root_down_and_an_ancestor_class_stays_alone():
    # thing -> tool is a chain (one child): splitting {hammer, saw, tool} goes below tool into
    # hammer | saw | tool (the class that is the root); for 2 groups the siblings merge back
    assert hierarchy_groups(["hammer", "saw", "tool"], 3, TOY) == [[0], [1], [2]]
    assert hierarchy_groups(["hammer", "saw", "tool"], 2, TOY) == [[0, 1], [2]]
    assert root_path("saw", TOY) == ["root", "thing", "tool", "saw"]


def test_imagenet1k_groups_partition_the_classes():
    wnids = imagenet1k_wnids()
    groups = hierarchy_groups(wnids, 8)
    assert len(groups) == 8
    assert sorted(c for g in groups for c in g) == list(range(1000))
    h = load_hierarchy()
    dogs = [i for i, w in enumerate(wnids) if "n02084071" in h.ancestors(w)]  # dog, domestic dog
    home = {next(k for k, g in enumerate(groups) if i in g) for i in dogs}
    assert len(home) == 1  # all 118 dog breeds fall into one group


def test_unknown_wnid():
    with pytest.raises(InvalidInputError, match="not in the shipped WordNet hierarchy"):
        hierarchy_groups(["n99999999"])
