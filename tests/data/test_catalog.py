"""The dataset catalogue: entries load and validate, and their checksums and counts agree with
the independent copies in torchvision and pytorch-ood (installed; read, never downloaded)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from oodbench.data import catalog
from oodbench.errors import ConfigError, InvalidInputError, UnknownNameError

REQUIRED = [
    "imagenet-1k-val",
    "imagenet-1k-train",
    "imagenet-21k-fall11",
    "imagenet-21k-winter21",
    "openood-imagenet",
    "openood-ssb-hard",
    "openood-ninco",
    "openood-inaturalist",
    "openood-textures",
    "openood-openimage-o",
    "mos-inaturalist",
    "mos-sun",
    "mos-places",
    "dtd",
    "imagenet-o",
    "cifar10",
    "cifar100",
    "openood-cifar10",
    "openood-cifar100",
    "openood-tin",
    "openood-mnist",
    "openood-svhn",
    "openood-places365",
]


def test_every_entry_the_issue_asks_for_is_there() -> None:
    names = catalog.available()
    assert set(REQUIRED) <= set(names)
    for name in names:
        info = catalog.get(name)
        assert info.name == name and info.title and info.licence and info.homepage
        assert info.manual or info.public_downloads, f"{name}: no way to get it"
        assert info.notes, f"{name}: provenance of counts/checksums missing"
        for d in info.downloads:
            assert d.has_checksum == bool(d.checksum_source), f"{name}: checksum without source"


def test_unknown_dataset_suggests_close_names() -> None:
    with pytest.raises(UnknownNameError) as err:
        catalog.get("imagenet-val")
    assert "imagenet-1k-val" in err.value.close


def test_describe_and_where_to_get() -> None:
    text = catalog.get("dtd").describe()
    assert "5,640" in text and "dtd-r1.0.1.tar.gz" in text and "oodbench data download dtd" in text
    text = catalog.get("imagenet-1k-val").describe()
    assert "no public URL" in text and "image-net.org" in text
    assert "line count unknown" in catalog.get("openood-textures").describe()


def test_entries_validate_their_fields() -> None:
    info = catalog.get("dtd")
    with pytest.raises(InvalidInputError, match="layout"):
        replace(info, layout="zip")
    with pytest.raises(InvalidInputError, match="num_images"):
        replace(info, num_images=-1)
    with pytest.raises(InvalidInputError, match="unknown key 'num_imgs'; did you mean 'num_images'"):
        catalog.parse('[x]\ntitle = "x"\nlayout = "image-folder"\nnum_imgs = 3\n')
    with pytest.raises(InvalidInputError, match="image_lists"):
        catalog.parse('[x]\ntitle = "x"\nlayout = "image-lists"\n')


def test_a_typo_in_the_catalogue_names_the_file_the_entry_and_the_closest_key() -> None:
    text = '[x]\ntitle = "x"\nlayout = "image-folder"\ndownloads = [{ filename = "a", md55 = "0" }]\n'
    with pytest.raises(ConfigError) as err:
        catalog.parse(text, "my_datasets.toml")
    assert str(err.value) == ("my_datasets.toml: [x].downloads #1: unknown key 'md55'; did you mean "
                              "'md5'? valid keys: filename, url, md5, sha256, checksum_source")
    with pytest.raises(ConfigError, match="^my_datasets.toml: top level: entry 'x' sets 'name'"):
        catalog.parse('[x]\nname = "y"\ntitle = "x"\nlayout = "image-folder"\n', "my_datasets.toml")


def test_internal_consistency_of_counts() -> None:
    val = catalog.get("imagenet-1k-val")
    lists = {lst.role: lst.count for lst in catalog.get("openood-imagenet").image_lists}
    assert lists["id-test"] + lists["id-val"] == val.num_images == 50 * val.num_classes
    dtd = catalog.get("dtd")
    assert dtd.num_images == 120 * dtd.num_classes  # DTD: 120 images per class
    texture = {lst.path: lst.count for lst in catalog.get("openood-textures").image_lists}
    assert texture["benchmark_imglist/cifar10/test_texture.txt"] == dtd.num_images
    for name in ("openood-cifar10", "openood-cifar100"):
        ids = {lst.role: lst.count for lst in catalog.get(name).image_lists}
        assert ids["id-test"] + ids["id-val"] == 10_000  # the CIFAR test set


# -- checksums and counts against independent installed copies -----------------------------
def _md5(name: str, filename: str) -> str | None:
    return next(d.md5 for d in catalog.get(name).downloads if d.filename == filename)


def test_archive_checksums_equal_torchvision() -> None:
    from torchvision.datasets import CIFAR10, CIFAR100, DTD
    from torchvision.datasets.imagenet import ARCHIVE_META

    assert _md5("cifar10", CIFAR10.filename) == CIFAR10.tgz_md5
    assert _md5("cifar100", CIFAR100.filename) == CIFAR100.tgz_md5
    assert _md5("dtd", "dtd-r1.0.1.tar.gz") == DTD._MD5
    assert _md5("imagenet-1k-val", ARCHIVE_META["val"][0]) == ARCHIVE_META["val"][1]
    assert _md5("imagenet-1k-val", ARCHIVE_META["devkit"][0]) == ARCHIVE_META["devkit"][1]
    assert _md5("imagenet-1k-train", ARCHIVE_META["train"][0]) == ARCHIVE_META["train"][1]


def test_cifar_manifests_equal_torchvision() -> None:
    from torchvision.datasets import CIFAR10, CIFAR100

    for name, cls in (("cifar10", CIFAR10), ("cifar100", CIFAR100)):
        expected = {f"{cls.base_folder}/{f}": md5 for f, md5 in cls.train_list + cls.test_list}
        expected[f"{cls.base_folder}/{cls.meta['filename']}"] = cls.meta["md5"]
        assert dict(catalog.get(name).manifest) == expected


def test_checksums_and_counts_equal_pytorch_ood() -> None:
    pytest.importorskip("pytorch_ood")
    from pytorch_ood.dataset.img import NINCO, ImageNetO, Textures
    from pytorch_ood.dataset.img.base import _get_resource_file

    assert _md5("imagenet-o", ImageNetO.filename) == ImageNetO.tgz_md5
    assert _md5("ninco", NINCO.filename) == NINCO.tgz_md5s
    assert _md5("dtd", "dtd-r1.0.1.tar.gz") == Textures.tgz_md5
    openimage = {lst.role: lst.count for lst in catalog.get("openood-openimage-o").image_lists}
    for role, resource in (("far-ood", "test_openimage_o.json"), ("ood-val", "val_openimage_o.json")):
        names = json.loads(Path(_get_resource_file(resource)).read_text())
        assert openimage[role] == len(names)
