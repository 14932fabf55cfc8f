"""The published C-OOD results (Galil, Dabbah & El-Yaniv, ICLR 2023) as data: the official
file (bundled, checksummed, or downloaded) read into a tidy DataFrame, and the paper's
confidence functions matched to oodbench detectors.

:mod:`oodbench.results.paper` looks them up, ranks a user's rows among them and draws them; it
describes the table's columns and provenance.
"""

from __future__ import annotations

import hashlib
import io
import lzma
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oodbench.config import cache_dir
from oodbench.data.download import ChecksumError
from oodbench.data.download import download as download_file
from oodbench.errors import CacheError, DataError, MissingDataError, UnknownNameError
from oodbench.params import to_text

PAPER_RESULTS_URL = (
    "https://raw.githubusercontent.com/mdabbah/COOD_benchmarking/main/"
    "paper_results/all_paper_results.csv"
)
#: sha256 of ``all_paper_results.csv`` (commit e0cab2f of mdabbah/COOD_benchmarking)
PAPER_RESULTS_SHA256 = "80cac24f7698e3ae8eadcb710573b728c716abf0817e1424f72914c07430263f"
#: the official file, xz-compressed byte for byte, inside the package
BUNDLED_NAME = "all_paper_results.csv.xz"

#: the file's columns -> tidy names (the same names as ``CoodBenchmark`` rows)
COLUMNS = {
    "model name": "model",
    "confidence function": "paper_kappa",
    "severity level": "level",
    "percentile": "percentile",
    "ood-auroc": "auroc",
    "ood_avg_conf": "ood_mean_kappa",
    "id-acc": "id_accuracy",
    "id-auroc": "id_auroc",
    "id_avg_conf": "id_mean_kappa",
}


@dataclass(frozen=True)
class PaperKappa:
    """One confidence function of the paper and the oodbench detector that computes it."""

    paper_name: str
    kappa: str
    detector: str
    hyperparams: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def published_row(self) -> dict[str, str]:
        """This kappa's configuration as the keys of a published row (``oodbench.published``):
        ``detector``, ``preset`` (``"cood"`` unless it names another) and ``hyperparams``."""
        extra = dict(self.hyperparams)
        preset = str(extra.pop("preset", "cood"))
        return {"method": self.paper_name, "detector": self.detector, "preset": preset,
                "hyperparams": to_text(extra) if extra else ""}


#: every confidence function in the published results, in one table
PAPER_KAPPAS: tuple[PaperKappa, ...] = (
    PaperKappa("softmax", "softmax", "msp", note="maximum softmax probability"),
    PaperKappa("max_logit", "max_logit", "maxlogit", note="maximum logit"),
    PaperKappa("entropy", "entropy", "entropy", note="negative entropy of the softmax"),
    PaperKappa(
        "odin_temperature-2_noise_mag-1e-05",
        "odin",
        "odin",
        {"preset": "cood_code"},
        "ODIN with T=2 and noise 1e-5 as the official code computes it (preset 'cood_code': "
        "the input gradient of the cross-entropy of the softmax probabilities, divided by the "
        "ImageNet std); preset 'cood' is ODIN as the paper describes it",
    ),
    PaperKappa(
        "mcd_entropy",
        "mc_dropout",
        "mc_dropout",
        {"preset": "cood"},
        "negative entropy of the mean softmax over 30 MC-dropout passes (preset 'cood'; the "
        "'*_original' ViTs with old timm's dropout 0.1, vit_drop_rate)",
    ),
)
_BY_PAPER = {k.paper_name: k for k in PAPER_KAPPAS}


def kappa_for(name: str) -> PaperKappa:
    """The paper kappa for a short name, a paper name or an oodbench detector name."""
    for k in PAPER_KAPPAS:
        if name in (k.kappa, k.paper_name, k.detector):
            return k
    valid = {k.kappa for k in PAPER_KAPPAS} | {k.detector for k in PAPER_KAPPAS}
    raise UnknownNameError("paper confidence function", name, valid)


def download(url: str = PAPER_RESULTS_URL, *, sha256: str | None = PAPER_RESULTS_SHA256) -> Path:
    """Download ``url`` once into ``cache_dir()/paper/`` and verify its checksum (through the
    one downloader, :func:`oodbench.data.download.download`); a cached copy of another version
    is downloaded again."""
    dest = cache_dir() / "paper" / Path(url.split("?", 1)[0]).name
    try:
        return download_file(url, dest, sha256=sha256, allow_unverified=sha256 is None,
                             resume=False, replace_stale=True)
    except ChecksumError as err:
        raise CacheError(f"{url}: {err} (the published file changed or the download is "
                         "corrupt; pass sha256=None to accept it)") from err
    except DataError as err:
        raise MissingDataError(
            f"could not download {url} ({err}); download it by hand and pass its path, or put "
            f"it at {dest}"
        ) from err


def bundled_bytes() -> bytes:
    """The official ``all_paper_results.csv``, decompressed from the package and checksummed."""
    packed = resources.files("oodbench.published").joinpath("_data", BUNDLED_NAME)
    try:
        data = lzma.decompress(packed.read_bytes())
    except (OSError, lzma.LZMAError) as err:
        raise DataError(
            f"the bundled C-OOD results ({BUNDLED_NAME}) cannot be read ({err}); reinstall "
            f"oodbench, or pass a copy of all_paper_results.csv (--csv / load(path))"
        ) from err
    digest = hashlib.sha256(data).hexdigest()
    if digest != PAPER_RESULTS_SHA256:
        raise CacheError(
            f"the bundled C-OOD results have sha256 {digest}, expected {PAPER_RESULTS_SHA256}: "
            "the package is damaged; reinstall oodbench or pass a copy of all_paper_results.csv"
        )
    return data


@lru_cache(maxsize=1)
def _bundled_table() -> pd.DataFrame:
    return _tidy(pd.read_csv(io.BytesIO(bundled_bytes())), BUNDLED_NAME)


def load(path_or_url: str | Path | None = None) -> pd.DataFrame:
    """The published results as a tidy DataFrame (one row per model x kappa x level).

    ``None`` (default): the copy bundled with oodbench, offline. ``path_or_url``: a local copy
    of ``all_paper_results.csv``, or an ``http(s)`` URL (downloaded once into the cache,
    checksummed when it is the official URL). Values keep the file's full precision.
    """
    if path_or_url is None:
        return _bundled_table().copy()
    text = str(path_or_url)
    if text.startswith(("http://", "https://")):
        path = download(text, sha256=PAPER_RESULTS_SHA256 if text == PAPER_RESULTS_URL else None)
    else:
        path = Path(path_or_url)
        if not path.is_file():
            raise MissingDataError(
                f"{path} does not exist; pass the path of all_paper_results.csv (from "
                f"{PAPER_RESULTS_URL}), or nothing to use the copy bundled with oodbench"
            )
    return _tidy(pd.read_csv(path), str(path))


def _tidy(raw: pd.DataFrame, origin: str) -> pd.DataFrame:
    missing = sorted(set(COLUMNS) - set(raw.columns))
    if missing:
        raise DataError(
            f"{origin} is not the C-OOD paper results format: missing columns {missing} "
            f"(expected {sorted(COLUMNS)})"
        )
    df = raw[list(COLUMNS)].rename(columns=COLUMNS)
    df["model"] = df["model"].astype(str)
    df["paper_kappa"] = df["paper_kappa"].astype(str)
    unknown = sorted(set(df["paper_kappa"]) - set(_BY_PAPER))
    df.insert(1, "kappa", df["paper_kappa"].map(lambda n: _BY_PAPER[n].kappa if n in _BY_PAPER else n))
    df.insert(2, "detector", df["paper_kappa"].map(lambda n: _BY_PAPER[n].detector if n in _BY_PAPER else n))
    df["level"] = df["level"].astype(np.int64)
    df.attrs["unknown_kappas"] = unknown
    return df.reset_index(drop=True)


