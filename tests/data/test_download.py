"""The download helper, offline: a fake server stands in for ``urllib`` (no network in tests)."""

from __future__ import annotations

import hashlib
import io
import tarfile
import urllib.error
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from oodbench.data import catalog, download
from oodbench.data.catalog import Download
from oodbench.errors import DataError, InvalidInputError

PAYLOAD = bytes(range(256)) * 4000  # ~1 MB, several chunks
MD5 = hashlib.md5(PAYLOAD).hexdigest()
SHA256 = hashlib.sha256(PAYLOAD).hexdigest()


class FakeResponse(io.BytesIO):
    def __init__(self, body: bytes, status: int) -> None:
        super().__init__(body)
        self.status = status
        self.headers = {"Content-Length": str(len(body))}


class FakeServer:
    """Serves ``PAYLOAD``; honours ``Range`` unless ``ranges=False``; records the requests."""

    def __init__(self, ranges: bool = True, fail: Exception | None = None) -> None:
        self.ranges, self.fail, self.requests = ranges, fail, []

    def __call__(self, request, timeout):
        self.requests.append(request.get_header("Range"))
        if self.fail is not None:
            raise self.fail
        start = 0
        header = request.get_header("Range")
        if header and self.ranges:
            start = int(header.split("=")[1].rstrip("-"))
            return FakeResponse(PAYLOAD[start:], 206)
        return FakeResponse(PAYLOAD, 200)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    fake = FakeServer()
    monkeypatch.setattr(download, "_urlopen", fake)
    return fake


def test_download_verifies_and_renames(tmp_path: Path, server: FakeServer) -> None:
    seen = []
    out = download.download("http://x/a.bin", tmp_path / "a.bin", md5=MD5, sha256=SHA256,
                            progress=lambda done, total: seen.append((done, total)))
    assert out.read_bytes() == PAYLOAD and not (tmp_path / "a.bin.part").exists()
    assert seen[-1] == (len(PAYLOAD), len(PAYLOAD))
    assert download.download("http://x/a.bin", out, md5=MD5) == out  # already there: kept
    assert len(server.requests) == 1


def test_resume_with_range(tmp_path: Path, server: FakeServer) -> None:
    (tmp_path / "a.bin.part").write_bytes(PAYLOAD[:300_000])
    out = download.download("http://x/a.bin", tmp_path / "a.bin", md5=MD5)
    assert server.requests == ["bytes=300000-"]
    assert out.read_bytes() == PAYLOAD


def test_server_without_range_restarts(tmp_path: Path, server: FakeServer) -> None:
    server.ranges = False
    (tmp_path / "a.bin.part").write_bytes(b"garbage that must not stay")
    out = download.download("http://x/a.bin", tmp_path / "a.bin", md5=MD5)
    assert out.read_bytes() == PAYLOAD


def test_complete_part_and_416(tmp_path: Path, server: FakeServer) -> None:
    (tmp_path / "a.bin.part").write_bytes(PAYLOAD)
    server.fail = urllib.error.HTTPError("http://x", 416, "range not satisfiable", {}, None)
    out = download.download("http://x/a.bin", tmp_path / "a.bin", md5=MD5)
    assert out.read_bytes() == PAYLOAD


def test_checksum_mismatch_deletes_the_part(tmp_path: Path, server: FakeServer) -> None:
    with pytest.raises(download.ChecksumError, match="md5 is"):
        download.download("http://x/a.bin", tmp_path / "a.bin", md5="0" * 32)
    assert not (tmp_path / "a.bin").exists() and not (tmp_path / "a.bin.part").exists()


def test_network_error_keeps_the_part(tmp_path: Path, server: FakeServer) -> None:
    (tmp_path / "a.bin.part").write_bytes(PAYLOAD[:10])
    server.fail = urllib.error.URLError("no route to host")
    with pytest.raises(DataError, match="next call resumes it"):
        download.download("http://x/a.bin", tmp_path / "a.bin", md5=MD5)
    assert (tmp_path / "a.bin.part").read_bytes() == PAYLOAD[:10]


def test_no_checksum_needs_consent(tmp_path: Path, server: FakeServer) -> None:
    with pytest.raises(InvalidInputError, match="allow_unverified"):
        download.download("http://x/a.bin", tmp_path / "a.bin")
    assert server.requests == []
    assert download.download("http://x/a.bin", tmp_path / "a.bin", allow_unverified=True).exists()


def make_tar(path: Path, members: dict[str, bytes]) -> bytes:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path.read_bytes()


def test_extract_tar_and_zip_and_refuse_escapes(tmp_path: Path) -> None:
    make_tar(tmp_path / "ok.tar.gz", {"d/a.txt": b"a"})
    assert (download.extract(tmp_path / "ok.tar.gz", tmp_path / "out") / "d" / "a.txt").read_bytes() == b"a"
    with zipfile.ZipFile(tmp_path / "ok.zip", "w") as zf:
        zf.writestr("z/b.txt", b"b")
    assert (download.extract(tmp_path / "ok.zip", tmp_path / "out") / "z" / "b.txt").read_bytes() == b"b"
    with zipfile.ZipFile(tmp_path / "evil.zip", "w") as zf:
        zf.writestr("../evil.txt", b"x")
    with pytest.raises(DataError, match="outside"):
        download.extract(tmp_path / "evil.zip", tmp_path / "out")
    make_tar(tmp_path / "evil.tar.gz", {"../evil.txt": b"x"})
    with pytest.raises(tarfile.TarError):
        download.extract(tmp_path / "evil.tar.gz", tmp_path / "out2")
    assert not (tmp_path / "evil.txt").exists()


def test_download_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body = make_tar(tmp_path / "dtd.tar.gz", {"dtd/images/banded/banded_0001.jpg": b"jpeg"})
    monkeypatch.setattr(download, "_urlopen", lambda request, timeout: FakeResponse(body, 200))
    item = Download("dtd.tar.gz", "http://x/dtd.tar.gz", md5=hashlib.md5(body).hexdigest(),
                    checksum_source="test")
    info = replace(catalog.get("dtd"), downloads=(item,))
    paths = download.download_dataset(info, tmp_path / "data")
    assert paths == [tmp_path / "data" / "dtd.tar.gz"]
    assert (tmp_path / "data" / "dtd" / "images" / "banded" / "banded_0001.jpg").read_bytes() == b"jpeg"
    with pytest.raises(DataError, match="no public download URL") as err:
        download.download_dataset(catalog.get("imagenet-1k-val"), tmp_path)
    assert "image-net.org" in str(err.value)
