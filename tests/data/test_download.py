"""The download helper, offline: pooch and requests talk to an HTTP server on 127.0.0.1 that
the test starts (no network in tests)."""

from __future__ import annotations

import ast
import hashlib
import io
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from oodbench.data import catalog, download
from oodbench.data.catalog import Download
from oodbench.errors import DataError, InvalidInputError
from tests.conftest import REPO

PAYLOAD = bytes(range(256)) * 4000  # ~1 MB, several chunks
MD5 = hashlib.md5(PAYLOAD).hexdigest()
SHA256 = hashlib.sha256(PAYLOAD).hexdigest()


class FakeServer(ThreadingHTTPServer):
    """Serves ``payload`` at every path; honours ``Range`` unless ``ranges=False``; records the
    ``Range`` header of every request. ``fail``: an HTTP status to answer with, or ``"drop"``
    to close the connection unanswered; ``cut_first``: the first answer sends only that many
    bytes of its body, then closes the connection."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.payload, self.ranges, self.requests = PAYLOAD, True, []
        self.fail: int | str | None = None
        self.cut_first: int | None = None
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: FakeServer

    def do_GET(self) -> None:
        srv = self.server
        header = self.headers.get("Range")
        srv.requests.append(header)
        if srv.fail == "drop":
            self.close_connection = True
            return
        if isinstance(srv.fail, int):
            self.send_error(srv.fail)
            return
        start = int(header.split("=")[1].rstrip("-")) if header and srv.ranges else 0
        body = srv.payload[start:]
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if srv.cut_first is not None:
            body, srv.cut_first = body[: srv.cut_first], None
            self.close_connection = True
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # keep the test output quiet
        pass


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeServer]:
    monkeypatch.setattr(download, "RETRIES", 0)  # failures fail at once (retries: their own test)
    fake = FakeServer()
    thread = threading.Thread(target=fake.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield fake
    fake.shutdown()
    fake.server_close()
    thread.join()


def test_download_verifies_and_renames(tmp_path: Path, server: FakeServer) -> None:
    seen = []
    out = download.download(f"{server.url}/a.bin", tmp_path / "a.bin", md5=MD5, sha256=SHA256,
                            progress=lambda done, total: seen.append((done, total)))
    assert out.read_bytes() == PAYLOAD and not (tmp_path / "a.bin.part").exists()
    assert seen[-1] == (len(PAYLOAD), len(PAYLOAD))
    assert download.download(f"{server.url}/a.bin", out, md5=MD5) == out  # already there: kept
    assert len(server.requests) == 1


def test_resume_with_range(tmp_path: Path, server: FakeServer) -> None:
    (tmp_path / "a.bin.part").write_bytes(PAYLOAD[:300_000])
    out = download.download(f"{server.url}/a.bin", tmp_path / "a.bin", md5=MD5)
    assert server.requests == ["bytes=300000-"]
    assert out.read_bytes() == PAYLOAD


def test_server_without_range_restarts(tmp_path: Path, server: FakeServer) -> None:
    server.ranges = False
    (tmp_path / "a.bin.part").write_bytes(b"garbage that must not stay")
    out = download.download(f"{server.url}/a.bin", tmp_path / "a.bin", md5=MD5)
    assert out.read_bytes() == PAYLOAD


def test_complete_part_and_416(tmp_path: Path, server: FakeServer) -> None:
    (tmp_path / "a.bin.part").write_bytes(PAYLOAD)
    server.fail = 416
    out = download.download(f"{server.url}/a.bin", tmp_path / "a.bin", md5=MD5)
    assert out.read_bytes() == PAYLOAD


def test_checksum_mismatch_deletes_the_part(tmp_path: Path, server: FakeServer) -> None:
    with pytest.raises(download.ChecksumError, match="md5 is"):
        download.download(f"{server.url}/a.bin", tmp_path / "a.bin", md5="0" * 32)
    assert not (tmp_path / "a.bin").exists() and not (tmp_path / "a.bin.part").exists()


def test_network_error_keeps_the_part(tmp_path: Path, server: FakeServer) -> None:
    (tmp_path / "a.bin.part").write_bytes(PAYLOAD[:10])
    server.fail = "drop"
    with pytest.raises(DataError, match="next call resumes it"):
        download.download(f"{server.url}/a.bin", tmp_path / "a.bin", md5=MD5)
    assert (tmp_path / "a.bin.part").read_bytes() == PAYLOAD[:10]


def test_no_checksum_needs_consent(tmp_path: Path, server: FakeServer) -> None:
    with pytest.raises(InvalidInputError, match="allow_unverified"):
        download.download(f"{server.url}/a.bin", tmp_path / "a.bin")
    assert server.requests == []
    assert download.download(f"{server.url}/a.bin", tmp_path / "a.bin", allow_unverified=True).exists()


def test_dropped_connection_is_retried_and_resumed(
    tmp_path: Path, server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(download, "RETRIES", 1)
    server.cut_first = 400_000  # the first answer breaks off after 400 kB
    out = download.download(f"{server.url}/a.bin", tmp_path / "a.bin", sha256=SHA256)
    assert out.read_bytes() == PAYLOAD and not (tmp_path / "a.bin.part").exists()
    first, second = server.requests  # pooch's retry asks only for the bytes still missing
    assert first is None and second is not None
    kept = int(second.split("=")[1].rstrip("-"))
    assert 0 < kept <= 400_000


def test_http_error_and_bad_urls_are_named(tmp_path: Path, server: FakeServer) -> None:
    server.fail = 404
    with pytest.raises(DataError, match=rf"{server.url}/a.bin failed: HTTP 404 Not Found; check the URL"):
        download.download(f"{server.url}/a.bin", tmp_path / "a.bin", md5=MD5)
    with pytest.raises(InvalidInputError, match="downloads http, https, file URLs"):
        download.download("ftp://host/a.bin", tmp_path / "a.bin", md5=MD5)
    assert not (tmp_path / "a.bin").exists()


def test_a_stale_file_is_refused_or_replaced(tmp_path: Path, server: FakeServer) -> None:
    stale = tmp_path / "a.bin"
    stale.write_bytes(b"another version")
    with pytest.raises(download.ChecksumError, match=f"md5 is {hashlib.md5(b'another version').hexdigest()}"):
        download.download(f"{server.url}/a.bin", stale, md5=MD5)
    assert stale.read_bytes() == b"another version" and server.requests == []
    assert download.download(f"{server.url}/a.bin", stale, md5=MD5, replace_stale=True) == stale
    assert stale.read_bytes() == PAYLOAD


def test_second_checksum_is_checked_too(tmp_path: Path, server: FakeServer) -> None:
    with pytest.raises(download.ChecksumError, match="md5 is"):
        download.download(f"{server.url}/a.bin", tmp_path / "a.bin", sha256=SHA256, md5="0" * 32)
    assert not (tmp_path / "a.bin").exists()


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


def test_download_dataset(tmp_path: Path, server: FakeServer) -> None:
    body = make_tar(tmp_path / "dtd.tar.gz", {"dtd/images/banded/banded_0001.jpg": b"jpeg"})
    server.payload = body
    item = Download("dtd.tar.gz", f"{server.url}/dtd.tar.gz", md5=hashlib.md5(body).hexdigest(),
                    checksum_source="test")
    info = replace(catalog.get("dtd"), downloads=(item,))
    paths = download.download_dataset(info, tmp_path / "data")
    assert paths == [tmp_path / "data" / "dtd.tar.gz"]
    assert (tmp_path / "data" / "dtd" / "images" / "banded" / "banded_0001.jpg").read_bytes() == b"jpeg"
    with pytest.raises(DataError, match="no public download URL") as err:
        download.download_dataset(catalog.get("imagenet-1k-val"), tmp_path)
    assert "image-net.org" in str(err.value)


HTTP_CLIENTS = ("requests", "pooch", "urllib3", "httpx", "aiohttp", "ftplib", "urllib.request", "http.client")


def test_only_the_one_downloader_imports_an_http_client() -> None:
    src = REPO / "src" / "oodbench"
    importers = set()
    for path in src.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            if any(n == c or n.startswith(c + ".") for n in names for c in HTTP_CLIENTS):
                importers.add(path.relative_to(src).as_posix())
    assert importers == {"data/download.py"}
