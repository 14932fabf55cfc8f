"""``oodbench data list | info | check | download`` (no network: downloads are refused or faked)."""

from __future__ import annotations

import hashlib
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from oodbench.cli.main import main
from oodbench.data import catalog, download


def run(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def tiny_catalogue(monkeypatch: pytest.MonkeyPatch) -> None:
    """The catalogue with one extra entry whose counts fit a 2 x 2 image tree."""
    entries = {**catalog._builtin(), "tiny": replace(catalog.get("dtd"), name="tiny", num_images=4, num_classes=2)}
    monkeypatch.setattr(catalog, "_builtin", lambda: entries)


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    copy = download.ResumableDownloader.__call__

    def refuse(self, url, output_file, pooch_instance=None):
        if not url.startswith("file:"):  # a file:// copy is local
            raise AssertionError(f"tests must not download {url}")
        copy(self, url, output_file, pooch_instance)

    monkeypatch.setattr(download.ResumableDownloader, "__call__", refuse)


def tree(root: Path) -> Path:
    for cls in ("a", "b"):
        for i in range(2):
            path = root / cls / f"{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (4, 4)).save(path)
    return root


def test_list_and_info() -> None:
    out = run("data", "list")
    assert out.exit_code == 0 and "imagenet-1k-val" in out.output and "openood-ssb-hard" in out.output
    out = run("data", "info", "dtd")
    assert out.exit_code == 0
    assert "fff73e5086ae6bdbea199a49dfb8a4c1" in out.output and "47" in out.output
    out = run("data", "info", "imagenet-1kval")
    assert out.exit_code == 2 and "Did you mean 'imagenet-1k-val'" in out.output


def test_check_ok_and_wrong(tmp_path: Path, tiny_catalogue: None) -> None:
    out = run("data", "check", "tiny", str(tree(tmp_path / "ok")))
    assert out.exit_code == 0, out.output
    assert "OK: no problems found" in out.output
    nested = tmp_path / "nested"
    tree(nested / "inner")
    out = run("data", "check", "tiny", str(nested), "--sample", "1")
    assert out.exit_code == 1
    assert "[nested]" in out.output and f"pass {nested / 'inner'} instead" in out.output
    out = run("data", "check", "tiny", str(tmp_path / "absent"))
    assert out.exit_code == 1 and "does not exist" in out.output


def test_check_real_imagenet_subset(imagenet_val_1300: Path) -> None:
    out = run("data", "check", "imagenet-1k-val", str(imagenet_val_1300), "--sample", "10")
    assert out.exit_code == 1  # 1,300 of the 50,000 images: counts differ, and it says so
    assert "found 1,300 labelled images, expected 50,000" in out.output
    assert "labels from labels file" in out.output and "images decoded: 10" in out.output


def test_download_refusals(tmp_path: Path) -> None:
    out = run("data", "download", "imagenet-1k-val", str(tmp_path))
    assert out.exit_code == 2 and "no public download URL" in out.output and "image-net.org" in out.output
    out = run("data", "download", "mos-sun", str(tmp_path))  # no checksum is known
    assert out.exit_code == 2 and "--allow-unverified" in out.output and "SUN.tar.gz" in out.output


def test_download_fetches_checks_and_extracts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "mirror" / "pack.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tree(tmp_path / "tree"), arcname="pack")
    item = catalog.Download("pack.tar.gz", archive.as_uri(), md5=hashlib.md5(archive.read_bytes()).hexdigest(),
                            checksum_source="test")
    entries = {**catalog._builtin(), "tiny": replace(catalog.get("dtd"), name="tiny", downloads=(item,))}
    monkeypatch.setattr(catalog, "_builtin", lambda: entries)
    out = run("data", "download", "tiny", str(tmp_path / "data"))
    assert out.exit_code == 0, out.output
    assert f"downloaded {tmp_path / 'data' / 'pack.tar.gz'} (checksum verified)" in out.output
    assert (tmp_path / "data" / "pack" / "a" / "0.png").is_file()


def test_list_benchmarks_includes_the_specs_and_cood() -> None:
    out = CliRunner().invoke(main, ["list", "benchmarks"], terminal_width=200)
    assert out.exit_code == 0
    for name in ("cood", "openood-v1.5-imagenet", "openood-v1.5-cifar10", "mos-imagenet"):
        assert name in out.output
