"""ImageList: OpenOOD's ``relative/path label`` files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from oodbench.data import ImageList
from oodbench.errors import CorruptImageError, EmptyInputError, InvalidInputError, MissingDataError
from tests.data.test_folder import write_image


@pytest.fixture
def listed(tmp_path: Path) -> tuple[Path, Path, list[np.ndarray]]:
    root = tmp_path / "images"
    pixels = [
        write_image(root / "id" / "a.png", 0),
        write_image(root / "ood" / "b c.png", 1),  # a space in the path
        write_image(root / "id" / "d.png", 2),
    ]
    file = tmp_path / "test_set.txt"
    file.write_text("id/a.png 3\n\nood/b c.png -1\n  id/d.png\t0  \n\n")
    return file, root, pixels


def test_parse_labels_ids_and_pixels(listed: tuple[Path, Path, list[np.ndarray]]) -> None:
    file, root, pixels = listed
    src = ImageList(file, root)
    assert src.ids == ["id/a.png", "ood/b c.png", "id/d.png"]
    assert src.labels.tolist() == [3, -1, 0] and src.labels.dtype == np.int64
    assert src.name == "test_set" and ImageList(file, root, name="x").name == "x"
    for i, px in enumerate(pixels):
        assert np.array_equal(np.asarray(src.load(i)), px)


@pytest.mark.parametrize(
    ("text", "lineno"),
    [
        ("a.png 1\nb.png\n", 2),
        ("a.png 1\n\nb.png one\n", 3),
        ("a.png -2\n", 1),
        ("a.png 1.5\n", 1),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path: Path, text: str, lineno: int) -> None:
    file = tmp_path / "list.txt"
    file.write_text(text)
    with pytest.raises(InvalidInputError, match=rf"list\.txt, line {lineno}:"):
        ImageList(file, tmp_path)


def test_missing_and_empty_inputs(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError, match="image list"):
        ImageList(tmp_path / "none.txt", tmp_path)
    file = tmp_path / "list.txt"
    file.write_text("\n  \n")
    with pytest.raises(EmptyInputError, match="lists no images"):
        ImageList(file, tmp_path)
    file.write_text("a.png 0\n")
    with pytest.raises(MissingDataError, match="image root"):
        ImageList(file, tmp_path / "no_root")
    file.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(InvalidInputError, match="not UTF-8"):
        ImageList(file, tmp_path)


def test_missing_listed_file_is_a_corrupt_image(tmp_path: Path) -> None:
    file = tmp_path / "list.txt"
    file.write_text("ghost.png 0\n")
    src = ImageList(file, tmp_path)  # not checked up front
    with pytest.raises(CorruptImageError, match="ghost.png"):
        src.load(0)
    assert len(src.fingerprint()) == 64  # a missing file still fingerprints


def test_fingerprint(listed: tuple[Path, Path, list[np.ndarray]]) -> None:
    file, root, _ = listed
    a, b = ImageList(file, root), ImageList(file, root)
    assert a.fingerprint() == b.fingerprint()
    stat_fp, content_fp = a.fingerprint(), a.fingerprint(mode="content")
    write_image(root / "id" / "d.png", 50, size=12)  # different bytes and size
    assert a.fingerprint() != stat_fp and a.fingerprint(mode="content") != content_fp

    stat_fp = a.fingerprint()
    file.write_text("id/a.png 3\nood/b c.png -1\nid/d.png 1\n")  # one label changed
    assert ImageList(file, root).fingerprint() != stat_fp
    file.write_text("ood/b c.png -1\nid/a.png 3\nid/d.png 0\n")  # order changed
    assert ImageList(file, root).fingerprint() != stat_fp
