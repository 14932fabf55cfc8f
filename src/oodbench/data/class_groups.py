"""Class groups from the WordNet hierarchy, for MOS's group softmax.

Huang & Li (MOS, CVPR 2021, arXiv 2105.01879) group the ImageNet-1k classes by the WordNet
taxonomy (their best setting: 8 groups). ``hierarchy_groups`` does this for any list of wnids
with the hierarchy the project ships (:mod:`oodbench.data.wordnet`):

1. every class gets one path to the WordNet root, following each synset's first hypernym;
2. all classes start in one group, rooted at their deepest common synset;
3. while there are fewer than ``n_groups`` groups, the largest group that can still be split is
   split by the synsets one level below its root (a class that *is* the root stays on its own);
   a group whose classes share the next synset only moves its root down;
4. a split can make many groups at once; while there are more than ``n_groups``, the smallest
   group is merged into the group whose root is its closest relative (the longest shared root
   path; the smaller one on ties).

The result has exactly ``min(n_groups, len(wnids))`` groups. Groups list class indices
(positions in ``wnids``), ordered by their smallest member, ready for
``losses.create("mos", groups=...)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from oodbench.data.wordnet import Hierarchy, load_hierarchy
from oodbench.errors import InvalidInputError


def root_path(wnid: str, hierarchy: Hierarchy) -> list[str]:
    """The synsets from the root down to ``wnid`` along first hypernyms."""
    if wnid not in hierarchy:
        raise InvalidInputError(
            f"{wnid!r} is not in the shipped WordNet hierarchy (ImageNet-1k/21k classes and "
            "their hypernyms); give the groups yourself: groups=[[class ids], ...]"
        )
    path = [wnid]
    while hierarchy.parents.get(path[-1]):
        path.append(hierarchy.parents[path[-1]][0])
    return path[::-1]


def hierarchy_groups(
    wnids: Sequence[str], n_groups: int = 8, hierarchy: Hierarchy | None = None
) -> list[list[int]]:
    """Split the classes ``wnids`` into WordNet groups (see the module docstring)."""
    if n_groups < 1:
        raise InvalidInputError(f"n_groups must be >= 1; got {n_groups}")
    if len(set(wnids)) != len(wnids):
        raise InvalidInputError("hierarchy_groups: the wnids must be distinct")
    h = hierarchy or load_hierarchy()
    paths = [root_path(w, h) for w in wnids]
    depth = 0  # the common prefix of all paths ends at depth - 1
    while all(len(p) > depth + 1 for p in paths) and len({p[depth] for p in paths}) == 1:
        depth += 1
    groups: list[tuple[int, list[int]]] = [(depth - 1 if depth else 0, list(range(len(wnids))))]
    stuck: set[tuple[int, ...]] = set()
    while len(groups) < n_groups:
        candidates = [g for g in groups if len(g[1]) > 1 and tuple(g[1]) not in stuck]
        if not candidates:
            break
        level, members = max(candidates, key=lambda g: len(g[1]))
        groups.remove((level, members))
        while True:
            buckets: dict[str, list[int]] = {}
            for i in members:
                key = paths[i][level + 1] if len(paths[i]) > level + 1 else f"={wnids[i]}"
                buckets.setdefault(key, []).append(i)
            if len(buckets) > 1 or all(len(paths[i]) <= level + 1 for i in members):
                break
            level += 1  # every member shares the next synset: move the root down
        if len(buckets) == 1:
            stuck.add(tuple(members))
            groups.append((level, members))
            continue
        groups += [(level + 1, b) for b in buckets.values()]
    return sorted((sorted(m) for m in _merge_smallest(groups, paths, n_groups)), key=lambda g: g[0])


def _merge_smallest(
    groups: list[tuple[int, list[int]]], paths: list[list[str]], n_groups: int
) -> list[list[int]]:
    """Step 4 of the module docstring: merge the smallest group into its closest relative."""
    def root(level: int, members: list[int]) -> list[str]:
        return paths[members[0]][: level + 1] if len(members) > 1 else paths[members[0]]

    def shared(a: list[str], b: list[str]) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

    items = [(root(level, m), m) for level, m in groups]
    while len(items) > n_groups:
        small = min(range(len(items)), key=lambda i: (len(items[i][1]), min(items[i][1])))
        path, members = items.pop(small)
        best = max(range(len(items)), key=lambda i: (shared(path, items[i][0]), -len(items[i][1])))
        other_path, other = items[best]
        items[best] = (other_path[: shared(path, other_path)], other + members)
    return [m for _, m in items]
