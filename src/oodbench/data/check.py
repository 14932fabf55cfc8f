"""Check a local copy of a catalogue dataset: layout, counts, missing and corrupt files.

    report = check("imagenet-1k-val", "/data/ILSVRC2012/val", sample=2000)
    print(report.summary())        # what was found, each problem and how to fix it
    report.ok                      # False when anything is wrong

``oodbench data check NAME PATH`` prints the same report and exits non-zero when it is not ok.
Problems found: the folder missing, an archive that was not extracted, data nested one folder
too deep, class folders missing (images flat in the root), wrong class or image counts,
unlisted or missing files of an image list, files whose checksum differs from the catalogue's
manifest, and images that do not decode (all of them, or a seeded random ``sample``).

A ``DatasetInfo`` may be passed instead of a name, e.g. ``dataclasses.replace(get("dtd"),
num_images=6)`` to check a small copy against other counts.
"""

from __future__ import annotations

import os
import tarfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from oodbench.data import catalog
from oodbench.data._images import IMG_EXTENSIONS, open_rgb
from oodbench.data.catalog import DatasetInfo
from oodbench.errors import CorruptImageError, DataError

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip")
#: the kinds of problem a report may hold
KINDS = (
    "missing",
    "not-extracted",
    "nested",
    "layout",
    "count",
    "missing-files",
    "checksum",
    "labels",
    "corrupt",
)
SHOW = 5  # how many example paths a message names


@dataclass(frozen=True)
class Problem:
    """One thing that is wrong: ``kind`` (see ``KINDS``), what, and how to fix it."""

    kind: str
    message: str
    fix: str = ""


@dataclass
class CheckReport:
    """What ``check`` found. ``counts`` maps what was counted to how many were found."""

    dataset: str
    path: Path
    layout: str
    counts: dict[str, int] = field(default_factory=dict)
    expected: dict[str, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, kind: str, message: str, fix: str = "") -> None:
        assert kind in KINDS, kind
        self.problems.append(Problem(kind, message, fix))

    def summary(self) -> str:
        """A readable report: counts, notes, then every problem with its fix."""
        lines = [f"{self.dataset} at {self.path} (layout {self.layout})"]
        for key, value in self.counts.items():
            want = self.expected.get(key)
            lines.append(
                f"  {key}: {value:,}" + (f" (expected {want:,})" if want is not None else "")
            )
        lines += [f"  note: {n}" for n in self.notes]
        if self.ok:
            lines.append("OK: no problems found")
        else:
            lines.append(f"{len(self.problems)} problem(s):")
            for p in self.problems:
                lines.append(f"  [{p.kind}] {p.message}")
                if p.fix:
                    lines.append("      fix: " + p.fix.replace("\n", "\n           "))
        return "\n".join(lines)

    def raise_if_problems(self) -> None:
        """Raise :class:`DataError` with the summary when there is any problem."""
        if not self.ok:
            raise DataError(self.summary())


# -- file system helpers ------------------------------------------------------------------------
def _is_image(name: str) -> bool:
    return name.lower().endswith(IMG_EXTENSIONS)


def _is_archive(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def _images_below(root: Path) -> list[Path]:
    """Every image file below ``root`` (following symlinks, as OpenOOD set-ups use them)."""
    out: list[Path] = []
    for folder, dirs, files in os.walk(root, followlinks=True):
        dirs.sort()
        out.extend(Path(folder) / f for f in sorted(files) if _is_image(f))
    return out


def _subdirs(root: Path) -> list[Path]:
    return sorted(Path(e.path) for e in os.scandir(root) if e.is_dir())


def _archives_in(root: Path) -> list[Path]:
    return sorted(Path(e.path) for e in os.scandir(root) if e.is_file() and _is_archive(e.name))


def _examples(items: Sequence[object]) -> str:
    shown = ", ".join(str(i) for i in items[:SHOW])
    return shown + (f", ... ({len(items)} in all)" if len(items) > SHOW else "")


def _extract_command(archive: Path, into: Path) -> str:
    if archive.name.lower().endswith(".zip"):
        return f"unzip {archive} -d {into}"
    return f"tar -xf {archive} -C {into}"


def _single_child_chain(root: Path, fits: Callable[[Path], bool], depth: int = 3) -> Path | None:
    """Descend through folders that hold nothing but one sub-folder; the first that ``fits``."""
    current = root
    for _ in range(depth):
        entries = [e for e in os.scandir(current) if not e.name.startswith(".")]
        dirs = [Path(e.path) for e in entries if e.is_dir()]
        if len(dirs) != 1 or any(e.is_file() and _is_image(e.name) for e in entries):
            return None
        current = dirs[0]
        if fits(current):
            return current
    return None


def _decode(paths: Sequence[Path], sample: int | None, seed: int, report: CheckReport) -> None:
    """Decode all (``sample=None``) or a seeded random sample of the images; report failures."""
    if sample == 0 or not paths:
        return
    chosen: Sequence[Path] = paths
    if sample is not None and sample < len(paths):
        rng = np.random.default_rng(seed)
        chosen = [paths[i] for i in sorted(rng.choice(len(paths), size=sample, replace=False))]
        report.notes.append(f"decoded a random sample of {sample:,} of {len(paths):,} images")
    bad = []
    for path in chosen:
        try:
            open_rgb(path)
        except CorruptImageError as err:
            bad.append(f"{path} ({str(err.__cause__ or err)[:80]})")
    report.counts["images decoded"] = len(chosen)
    if bad:
        report.add(
            "corrupt",
            f"{len(bad)} of {len(chosen):,} decoded images are corrupt or unreadable: {_examples(bad)}",
            "re-download or re-extract the dataset (a partial download or a full disk truncates "
            "files); oodbench skips and reports such images during extraction",
        )


def _incomplete(info: DatasetInfo) -> str:
    return (
        "the copy is incomplete or a different version of the dataset; "
        f"`oodbench data info {info.name}` says where to get it"
    )


def _expect(report: CheckReport, key: str, found: int, want: int | None, what: str, fix: str) -> None:
    report.counts[key] = found
    if want is None:
        return
    report.expected[key] = want
    if found != want:
        report.add("count", f"found {found:,} {what}, expected {want:,}", fix)


# -- where is the data? ---------------------------------------------------------------------------
def _locate(info: DatasetInfo, path: Path, report: CheckReport) -> bool:
    """Problems with ``path`` itself (missing, an archive); True when the folder can be checked."""
    if not path.exists():
        report.add("missing", f"{path} does not exist", info.where_to_get())
        return False
    if path.is_file():
        known = {d.filename: d for d in info.downloads}
        item = known.get(path.name)
        if item is not None and item.has_checksum:
            from oodbench.data.download import ChecksumError, verify

            try:
                verify(path, md5=item.md5, sha256=item.sha256)
                report.notes.append(f"{path.name}: checksum matches the catalogue")
            except ChecksumError as err:
                report.add("checksum", str(err), info.where_to_get())
        if _is_archive(path.name) or tarfile.is_tarfile(path) or zipfile.is_zipfile(path):
            report.add(
                "not-extracted",
                f"{path} is an archive; oodbench needs the extracted folder",
                f"{_extract_command(path, path.parent)}, then check the folder it creates",
            )
        else:
            report.add("layout", f"{path} is a file, not a folder", info.where_to_get())
        return False
    return True


def _no_data(info: DatasetInfo, root: Path, report: CheckReport, what: str, fits: Callable[[Path], bool]) -> None:
    """Explain why ``root`` holds no data: archives not extracted, nested, or simply empty."""
    deeper = _single_child_chain(root, fits)
    if deeper is not None:
        report.add(
            "nested",
            f"{root} holds only the folder {deeper.relative_to(root)}, which holds the {what}: "
            "the data is nested too deep",
            f"pass {deeper} instead (or move its contents up into {root})",
        )
        return
    archives = _archives_in(root)
    if archives:
        report.add(
            "not-extracted",
            f"{root} holds no {what} but the archive(s) {_examples([a.name for a in archives])}",
            "; ".join(_extract_command(a, root) for a in archives[:SHOW]),
        )
        return
    report.add("missing", f"{root} holds no {what}", info.where_to_get())


# -- layouts ------------------------------------------------------------------------------------
def _check_image_folder(info: DatasetInfo, root: Path, report: CheckReport, sample: int | None, seed: int) -> None:
    images = _images_below(root)
    if not images:
        _no_data(info, root, report, "images", lambda p: bool(_images_below(p)))
        return
    _expect(report, "images", len(images), info.num_images, "images", _incomplete(info))
    _decode(images, sample, seed, report)


def _looks_like_classes(folder: Path, want: int | None) -> bool:
    subs = [d for d in _subdirs(folder) if _images_below(d)]
    return len(subs) == want if want else len(subs) >= 2


def _check_class_folders(info: DatasetInfo, root: Path, report: CheckReport, sample: int | None, seed: int) -> None:
    want = info.num_classes
    classes = [d for d in _subdirs(root) if not d.name.startswith(".")]
    flat = [root / e.name for e in os.scandir(root) if e.is_file() and _is_image(e.name)]
    per_class_tars = [a for a in _archives_in(root) if a.name.startswith("n") and a.name.endswith(".tar")]
    if not classes and per_class_tars and not flat:
        report.add(
            "not-extracted",
            f"{root} holds {len(per_class_tars):,} per-class archives ({_examples([a.name for a in per_class_tars])}) "
            "instead of class folders",
            f"cd {root} && for f in n*.tar; do d=${{f%.tar}}; mkdir -p $d && tar -xf $f -C $d && rm $f; done",
        )
        return
    if flat and want != 1:
        report.add(
            "layout",
            f"{len(flat):,} images lie directly in {root} (e.g. {flat[0].name}): the class folders "
            f"are missing (expected {want or 'one folder per class'} class folders)",
            "put each image in a sub-folder named after its class (for ImageNet: its wnid), "
            "or point to the folder that holds the class folders",
        )
    if not classes and not flat:
        _no_data(info, root, report, "class folders", lambda p: _looks_like_classes(p, want))
        return
    deeper = None
    if len(classes) == 1 and want not in (None, 1):
        deeper = _single_child_chain(root, lambda p: _looks_like_classes(p, want))
    if deeper is not None:
        report.add(
            "nested",
            f"{root} holds only {deeper.relative_to(root)}, which holds the class folders: the "
            "data is nested too deep",
            f"pass {deeper} instead",
        )
        return
    per_class = {d.name: _images_below(d) for d in classes}
    empty = [name for name, files in per_class.items() if not files]
    if empty:
        report.add(
            "missing-files",
            f"{len(empty)} class folders hold no images: {_examples(empty)}",
            "re-extract or re-download those classes",
        )
    _expect(report, "classes", len(classes), want, "class folders", _incomplete(info))
    if info.class_set == "imagenet-1k":
        from oodbench.data.imagenet import imagenet1k_wnids

        expected = set(imagenet1k_wnids())
        names = set(per_class)
        missing, extra = sorted(expected - names), sorted(names - expected)
        if missing or extra:
            report.add(
                "labels",
                "class folders differ from the 1000 ImageNet-1k wnids: "
                + (f"{len(missing)} missing ({_examples(missing)})" if missing else "")
                + ("; " if missing and extra else "")
                + (f"{len(extra)} unexpected ({_examples(extra)})" if extra else ""),
                "class folders must be named by wnid (n01440764, ...); re-extract the per-class archives",
            )
    images = [p for files in per_class.values() for p in files] + flat
    _expect(report, "images", len(images), info.num_images, "images", _incomplete(info))
    _decode(images, sample, seed, report)


def _check_imagenet_val(info: DatasetInfo, root: Path, report: CheckReport, sample: int | None, seed: int) -> None:
    from oodbench.data.imagenet_val import discover, missing_files_error

    try:
        layout = discover(root, strict=False)
    except DataError as err:
        kind = getattr(err, "kind", "labels")  # imagenet_val tags layout errors with a kind
        report.add(kind, str(err), info.where_to_get() if kind == "missing" else "")
        return
    report.notes.append(f"labels from {layout.label_source}")
    if layout.missing:
        missing = missing_files_error(layout.label_source, layout.image_root, layout.missing)
        report.add("missing-files", str(missing), _incomplete(info))
    if layout.unlabelled:
        report.add(
            "labels",
            f"{layout.unlabelled:,} image files in {layout.image_root} have no label in "
            f"{layout.label_source}",
            "remove files that are not ILSVRC-2012 validation images, or use a complete label source",
        )
    _expect(report, "images", len(layout.relpaths), info.num_images, "labelled images", _incomplete(info))
    _expect(report, "classes", int(np.unique(layout.labels).size), info.num_classes, "classes", _incomplete(info))
    _decode([layout.image_root / p for p in layout.relpaths], sample, seed, report)


def _check_imagenet21k(info: DatasetInfo, root: Path, report: CheckReport, sample: int | None, seed: int) -> None:
    from oodbench.data.imagenet import is_wnid

    folders = [d for d in _subdirs(root) if is_wnid(d.name)]
    tars = [
        Path(e.path) for e in os.scandir(root)
        if e.is_file() and e.name.endswith(".tar") and is_wnid(e.name[:-4])
    ]
    if not folders and not tars:
        _no_data(info, root, report, "wnid folders or per-synset <wnid>.tar files",
                 lambda p: any(is_wnid(e.name.removesuffix(".tar")) for e in os.scandir(p)))
        return
    wnids = {d.name for d in folders} | {t.name[:-4] for t in tars}
    _expect(report, "classes", len(wnids), info.num_classes, "synsets (folders + tars)", _incomplete(info))
    if tars:
        report.counts["per-synset tars"] = len(tars)
        report.notes.append(
            f"images inside the {len(tars):,} per-synset tars are not counted; "
            "extract them into <wnid>/ folders to count them"
        )
        chosen = tars if sample is None else [tars[i] for i in np.random.default_rng(seed).permutation(len(tars))[: max(sample, 0)]]
        broken = [t.name for t in chosen if not tarfile.is_tarfile(t)]
        if broken:
            report.add("corrupt", f"{len(broken)} per-synset archives are not valid tars: {_examples(broken)}",
                       "re-download those synsets")
    images = [p for d in folders for p in _images_below(d)]
    if folders:
        if tars:
            report.counts["images in folders"] = len(images)
        else:
            _expect(report, "images", len(images), info.num_images, "images", _incomplete(info))
    _decode(images, sample, seed, report)


def _read_list(path: Path, report: CheckReport) -> list[str] | None:
    from oodbench.data.image_list import parse_image_list
    from oodbench.errors import InvalidInputError

    try:
        return parse_image_list(path)[0]
    except InvalidInputError as err:
        report.add("layout", str(err), "use the list files of OpenOOD's benchmark_imglist download unchanged")
        return None


def _check_image_lists(info: DatasetInfo, root: Path, report: CheckReport, sample: int | None, seed: int) -> None:
    if not (root / "benchmark_imglist").is_dir():
        _no_data(info, root, report, "benchmark_imglist folder", lambda p: (p / "benchmark_imglist").is_dir())
        return
    listed: list[Path] = []
    for lst in info.image_lists:
        path = root / lst.path
        key = f"lines in {lst.path}"
        if not path.is_file():
            report.add("missing", f"the image list {lst.path} is missing under {root}",
                       "download OpenOOD's benchmark_imglist (see `oodbench data info "
                       f"{info.name}`) and extract it into {root}")
            continue
        names = _read_list(path, report)
        if names is None:
            continue
        _expect(report, key, len(names), lst.count, f"lines in {lst.path}",
                "this list is from a different OpenOOD version: download the v1.5 benchmark_imglist")
        base = root / lst.images
        files = [base / n for n in names]
        missing = [n for n, f in zip(names, files) if not f.is_file()]
        if missing:
            top = sorted({n.split("/")[0] for n in missing})
            absent = [t for t in top if not (base / t).exists()]
            zipped = [t for t in absent if (base / f"{t}.zip").is_file() or (base / t / f"{t}.zip").is_file()]
            fix = (f"extract {', '.join(f'{lst.images}/{t}.zip' for t in zipped)}" if zipped
                   else f"download {', '.join(absent)} into {base} with OpenOOD's script" if absent
                   else "re-download the dataset; the folder is incomplete")
            report.add("missing-files",
                       f"{len(missing):,} of {len(names):,} images listed in {lst.path} are missing under "
                       f"{base}: {_examples(missing)}", fix)
        listed.extend(f for f in files if f.is_file())
    _decode(sorted(set(listed)), sample, seed, report)


def _check_cifar(info: DatasetInfo, root: Path, report: CheckReport, sample: int | None, seed: int) -> None:
    from oodbench.data.download import file_digest

    folder_name = next(iter(info.manifest)).split("/")[0]
    base = root if root.name == folder_name else root / folder_name
    if not base.is_dir():
        _no_data(info, root, report, f"{folder_name} folder", lambda p: (p / folder_name).is_dir())
        return
    missing, wrong = [], []
    for rel, md5 in info.manifest.items():
        path = base / rel.split("/", 1)[1]
        if not path.is_file():
            missing.append(rel)
        elif file_digest(path, "md5") != md5:
            wrong.append(rel)
    report.counts["files with correct md5"] = len(info.manifest) - len(missing) - len(wrong)
    report.expected["files with correct md5"] = len(info.manifest)
    if missing:
        report.add("missing-files", f"missing: {_examples(missing)}", info.where_to_get())
    if wrong:
        report.add("checksum", f"md5 differs from torchvision's for {_examples(wrong)}",
                   "the files are damaged or another version: download and extract the archive again")
    if not missing and not wrong:
        report.notes.append(f"{info.num_images:,} images pinned by the md5 manifest")
    if sample not in (None, 0):
        report.notes.append("the python pickles hold arrays, not image files: nothing to decode")


_CHECKERS = {
    "image-folder": _check_image_folder,
    "class-folders": _check_class_folders,
    "imagenet-val": _check_imagenet_val,
    "imagenet21k": _check_imagenet21k,
    "image-lists": _check_image_lists,
    "cifar-python": _check_cifar,
}


def check(
    dataset: str | DatasetInfo,
    path: str | os.PathLike[str],
    *,
    sample: int | None = None,
    seed: int = 0,
) -> CheckReport:
    """Check the copy of ``dataset`` (a catalogue name or entry) at ``path``.

    ``sample``: decode every image (``None``), none (``0``) or a seeded random sample of that
    many. Never raises for problems of the data; they are in the returned report.
    """
    info = catalog.get(dataset) if isinstance(dataset, str) else dataset
    if sample is not None and sample < 0:
        from oodbench.errors import InvalidInputError

        raise InvalidInputError(f"sample must be >= 0 or None; got {sample}")
    root = Path(path).expanduser()
    report = CheckReport(info.name, root, info.layout)
    if _locate(info, root, report):
        _CHECKERS[info.layout](info, root, report, sample, seed)
    return report
