import numpy as np
import pytest

from oodbench.detectors import create
from oodbench.errors import ClassCountMismatchError, InvalidInputError

GROUPS = [[0, 2], [1]]  # blocks: [others, 0, 2], [others, 1] -> 5 outputs


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def test_minus_the_smallest_others_probability(make_acts):
    acts = make_acts(20, 5, 4)
    expected = [-min(softmax(row[0:3])[0], softmax(row[3:5])[0]) for row in acts.logits.astype(float)]
    # float64 softmaxes of 2 and 3 logits of size < 5: a few ulps apart on any CPU
    np.testing.assert_allclose(create("mos", groups=GROUPS).score(acts), expected, rtol=1e-12)


def test_hand_computed_and_extreme(make_acts):
    acts = make_acts(2, 5, 4)
    acts.logits[:] = [[0.0, 0.0, 0.0, 0.0, 0.0], [-1e4, 1e4, 0.0, 1e4, -1e4]]
    scores = create("mos", groups=GROUPS).score(acts)
    # row 0: others probability 1/3 in group 1 and 1/2 in group 2 -> -1/3
    # exps of 0 and of -1e4 (0 exactly): -1/3 to an ulp, and 0
    np.testing.assert_allclose(scores, [-1.0 / 3.0, -0.0], atol=1e-12)


def test_groups_from_the_activations_meta(make_acts):
    acts = make_acts(4, 5, 4)
    acts.meta["mos_groups"] = GROUPS
    # the same groups through the same code in this process: the same bits
    np.testing.assert_array_equal(create("mos").score(acts), create("mos", groups=GROUPS).score(acts))


def test_needs_groups_and_a_matching_head(make_acts):
    with pytest.raises(InvalidInputError, match="class groups"):
        create("mos").score(make_acts(3, 5, 4))
    with pytest.raises(ClassCountMismatchError, match="needs a head of 5 outputs"):
        create("mos", groups=GROUPS).score(make_acts(3, 4, 4))


# MOS's released head: 8 groups of these sizes (large_scale_ood group_config/taxonomy_level0.npy)
OFFICIAL_SIZES = (398, 521, 9, 7, 52, 8, 3, 2)


def _official_list(path, seed=0):
    """A list in the official format (data_lists/imagenet2012_group_softmax_val_list.txt:
    '<split>/<wnid>/<file> <group> <index in group>'), two images per class, lines shuffled:
    the 1000 wnids placed at random (group, index) slots of the official sizes."""
    from oodbench.data.imagenet import imagenet1k_wnids

    rng = np.random.default_rng(seed)
    wnids = list(rng.permutation(imagenet1k_wnids()))
    slots = [(g, i) for g, n in enumerate(OFFICIAL_SIZES) for i in range(n)]
    placed = dict(zip(wnids, slots))
    lines = [f"val/{w}/ILSVRC2012_val_{k}{j}.JPEG {g} {i}"
             for k, (w, (g, i)) in enumerate(placed.items()) for j in range(2)]
    path.write_text("\n".join(rng.permutation(lines)) + "\n")
    return placed


def softmax_rows(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _acts(logits):
    from oodbench.extract.activations import Activations

    n = len(logits)
    return Activations(logits=logits, labels=np.zeros(n, dtype=np.int64),
                       ids=np.array([str(i) for i in range(n)]))


def test_groups_from_the_official_list_score_as_the_official_code(tmp_path):
    """The groups read from the official list give the official score (large_scale_ood
    test_mos.py cal_ood_score: per slice [start, start + n + 1) of the head, softmax, 'others'
    = column 0, max over groups of -p_others) and put each class at the official column
    start_g + 1 + index (finetune.py get_group_slices, dataset.py labels[group] = index + 1)."""
    from oodbench.data.imagenet import imagenet1k_wnids
    from oodbench.detectors.mos import groups_from_list
    from oodbench.losses.mos import GroupLayout

    placed = _official_list(tmp_path / "list.txt")
    groups = groups_from_list(str(tmp_path / "list.txt"))
    assert [len(g) for g in groups] == list(OFFICIAL_SIZES)
    starts = np.cumsum([0] + [n + 1 for n in OFFICIAL_SIZES])[:-1]
    wnids = imagenet1k_wnids()
    layout = GroupLayout(groups)
    for wnid, (g, i) in placed.items():
        assert layout.class_column[wnids.index(wnid)] == starts[g] + 1 + i
    logits = np.random.default_rng(1).normal(size=(4, 1008)) * 3
    official = np.max([-softmax_rows(logits[:, s:s + n + 1])[:, 0]
                       for s, n in zip(starts, OFFICIAL_SIZES)], axis=0)
    scores = create("mos", groups=str(tmp_path / "list.txt")).score(_acts(logits))
    np.testing.assert_allclose(scores, official, rtol=1e-12)  # float64 softmax both ways


def test_a_broken_official_list_is_named(tmp_path):
    from oodbench.detectors.mos import groups_from_list

    _official_list(tmp_path / "list.txt")
    text = (tmp_path / "list.txt").read_text().splitlines()
    (tmp_path / "gap.txt").write_text("\n".join(x for x in text if not x.endswith(" 7 1")))
    with pytest.raises(InvalidInputError, match="each of the 1000 ImageNet-1k classes once"):
        groups_from_list(str(tmp_path / "gap.txt"))
    (tmp_path / "bad.txt").write_text("val/n99999999/x.JPEG 0 0\n")
    with pytest.raises(InvalidInputError, match="line 1: 'n99999999' is no ImageNet-1k wnid"):
        groups_from_list(str(tmp_path / "bad.txt"))
