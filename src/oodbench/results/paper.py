"""The published C-OOD results of Galil, Dabbah & El-Yaniv (ICLR 2023, arXiv 2302.11893).

The authors published every model x confidence function x severity level they benchmarked in
``paper_results/all_paper_results.csv`` of github.com/mdabbah/COOD_benchmarking (MIT licence).
This module reads that file into a tidy table, ranks models per level, places a user's own
``CoodBenchmark`` results among the published models and draws severity curves (the paper's
Figure 1: AUROC against severity level).

    df = load("all_paper_results.csv")            # or load() to download (checksummed, cached)
    leaderboard(df, kappa="max_logit", level=[0, 5, 10], top=10)
    rank(df, my_results)                          # percentile rank per detector and level

Tidy columns: ``model``, ``kappa`` (short name, ``PAPER_KAPPAS``), ``paper_kappa`` (as in the
file), ``detector`` (the oodbench detector computing that kappa), ``level``, ``percentile``,
``auroc``, ``ood_mean_kappa``, ``id_accuracy``, ``id_auroc``, ``id_mean_kappa``.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oodbench.config import cache_dir
from oodbench.errors import (
    CacheError,
    DataError,
    InvalidInputError,
    MissingDataError,
    UnknownNameError,
)

PAPER_RESULTS_URL = (
    "https://raw.githubusercontent.com/mdabbah/COOD_benchmarking/main/"
    "paper_results/all_paper_results.csv"
)
#: sha256 of ``all_paper_results.csv`` (commit e0cab2f of mdabbah/COOD_benchmarking)
PAPER_RESULTS_SHA256 = "80cac24f7698e3ae8eadcb710573b728c716abf0817e1424f72914c07430263f"

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

    def reproduces(self, hyperparams: Mapping[str, Any]) -> bool:
        """Whether a detector run with ``hyperparams`` computes this published kappa: every value
        that ``create(detector, **self.hyperparams)`` sets on purpose (its preset's, or the
        given ones) is the same."""
        from oodbench.detectors import create, preset_for

        wanted = dict(self.hyperparams)
        preset = wanted.pop("preset", None)
        if preset is not None:
            wanted = {**preset_for(self.detector, preset).hyperparams, **wanted}
        reference = create(self.detector, **self.hyperparams).hyperparams
        return all(json.dumps(hyperparams.get(k)) == json.dumps(reference[k]) for k in wanted)


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


# -- loading ----------------------------------------------------------------------------------
def download(url: str = PAPER_RESULTS_URL, *, sha256: str | None = PAPER_RESULTS_SHA256) -> Path:
    """Download ``url`` once into ``cache_dir()/paper/`` and verify its checksum."""
    from oodbench.data.download import file_digest

    dest = cache_dir() / "paper" / Path(url.split("?", 1)[0]).name
    if dest.is_file() and (sha256 is None or file_digest(dest, "sha256") == sha256):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as fh:
            for chunk in iter(lambda: response.read(1 << 20), b""):
                fh.write(chunk)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise MissingDataError(
            f"could not download {url} ({err}); download it by hand and pass its path, or put "
            f"it at {dest}"
        ) from err
    digest = file_digest(tmp, "sha256")
    if sha256 is not None and digest != sha256:
        tmp.unlink(missing_ok=True)
        raise CacheError(
            f"{url} has sha256 {digest}, expected {sha256}: the published file changed or the "
            "download is corrupt; pass sha256=None to accept it"
        )
    os.replace(tmp, dest)
    return dest


def load(path_or_url: str | Path | None = None) -> pd.DataFrame:
    """The published results as a tidy DataFrame (one row per model x kappa x level).

    ``path_or_url``: a local copy of ``all_paper_results.csv``, or an ``http(s)`` URL
    (downloaded once into the cache, checksummed when it is the official URL). ``None``: the
    official file (downloaded on first use).
    """
    if path_or_url is None:
        path_or_url = PAPER_RESULTS_URL
    text = str(path_or_url)
    if text.startswith(("http://", "https://")):
        path = download(text, sha256=PAPER_RESULTS_SHA256 if text == PAPER_RESULTS_URL else None)
    else:
        path = Path(path_or_url)
        if not path.is_file():
            raise MissingDataError(
                f"{path} does not exist; pass the path of all_paper_results.csv (from "
                f"{PAPER_RESULTS_URL}) or call load() to download it"
            )
    raw = pd.read_csv(path)
    missing = sorted(set(COLUMNS) - set(raw.columns))
    if missing:
        raise DataError(
            f"{path} is not the C-OOD paper results format: missing columns {missing} "
            f"(expected {sorted(COLUMNS)})"
        )
    df = raw[list(COLUMNS)].rename(columns=COLUMNS)
    unknown = sorted(set(df["paper_kappa"]) - set(_BY_PAPER))
    df.insert(1, "kappa", df["paper_kappa"].map(lambda n: _BY_PAPER[n].kappa if n in _BY_PAPER else n))
    df.insert(2, "detector", df["paper_kappa"].map(lambda n: _BY_PAPER[n].detector if n in _BY_PAPER else n))
    df["level"] = df["level"].astype(np.int64)
    df.attrs["unknown_kappas"] = unknown
    return df.reset_index(drop=True)


# -- queries ----------------------------------------------------------------------------------
def _kappa_name(df: pd.DataFrame, kappa: str) -> str:
    """``kappa`` as it appears in the table's ``kappa`` column (short names, detector names)."""
    return kappa if kappa in set(df["kappa"]) else kappa_for(kappa).kappa


def _select(df: pd.DataFrame, kappa: str, level: int | Sequence[int] | None) -> pd.DataFrame:
    out = df[df["kappa"] == _kappa_name(df, kappa)]
    if out.empty:
        raise InvalidInputError(
            f"no published results for kappa {kappa!r}; the file has {sorted(set(df['kappa']))}"
        )
    if level is not None:
        levels = [int(level)] if isinstance(level, (int, np.integer)) else [int(v) for v in level]
        bad = sorted(set(levels) - set(out["level"]))
        if bad:
            raise InvalidInputError(
                f"levels {bad} are not in the published results (levels "
                f"{sorted(set(out['level']))})"
            )
        out = out[out["level"].isin(levels)]
    return out


def leaderboard(
    df: pd.DataFrame,
    kappa: str = "max_logit",
    level: int | Sequence[int] = 0,
    top: int | None = 10,
    *,
    metric: str = "auroc",
) -> pd.DataFrame:
    """The best ``top`` models per level for one kappa, best first (``rank`` 1 = best).

    Columns: ``level``, ``rank``, ``model``, ``metric``'s column, ``id_accuracy``, ``id_auroc``,
    ``percentile``. Ties share the best rank (``method="min"``).
    """
    sub = _select(df, kappa, level).copy()
    sub["rank"] = sub.groupby("level")[metric].rank(ascending=False, method="min").astype(np.int64)
    sub = sub.sort_values(["level", "rank", "model"], kind="stable")
    if top is not None:
        sub = sub.groupby("level", sort=True).head(top)
    cols = ["level", "rank", "model", metric, "id_accuracy", "id_auroc", "percentile"]
    return sub[list(dict.fromkeys(cols))].reset_index(drop=True)


def _levels_of(results: pd.DataFrame) -> pd.Series:
    if "level" in results.columns:
        return results["level"].astype(np.int64)
    if "group" in results.columns:
        parsed = results["group"].astype(str).str.extract(r"^level_(\d+)$")[0]
        if parsed.isna().any():
            raise InvalidInputError(
                "results 'group' values must look like 'level_3' (CoodBenchmark rows)"
            )
        return parsed.astype(np.int64)
    raise InvalidInputError(
        "results need a 'level' column (or CoodBenchmark's 'group' = 'level_<i>'); got columns "
        f"{list(results.columns)}"
    )


def rank(
    df: pd.DataFrame,
    model_results: pd.DataFrame,
    *,
    kappa: str | None = None,
    metric: str = "auroc",
) -> pd.DataFrame:
    """Place a user's results among the published models, per detector and severity level.

    ``model_results``: rows of ``CoodBenchmark.run`` (columns ``detector``, ``level`` or
    ``group``, and ``metric``). Each row's detector is matched to the paper kappa it computes
    (``PAPER_KAPPAS``; ``kappa`` overrides it for every row). For each row::

        percentile_rank = 100 * (#published below + 0.5 * #published equal) / #published
        position        = 1 + #published strictly better

    Rows whose detector has no published counterpart are returned with NaN ranks. When the
    results carry ``hyperparams`` (JSON), ``like_for_like`` says whether the row's configuration
    is the one behind the published numbers (:meth:`PaperKappa.reproduces`; e.g. ODIN with
    ``preset="cood_code"``).
    """
    for col in ("detector", metric):
        if col not in model_results.columns:
            raise InvalidInputError(
                f"results need a {col!r} column (CoodBenchmark rows); got {list(model_results.columns)}"
            )
    levels = _levels_of(model_results)
    published = {name: g for name, g in df.groupby(["kappa", "level"])}
    rows = []
    for (_, row), level in zip(model_results.iterrows(), levels):
        try:
            paper_kappa: PaperKappa | None = kappa_for(kappa or str(row["detector"]))
        except UnknownNameError:
            paper_kappa = None
        k = None if paper_kappa is None else paper_kappa.kappa
        ref = published.get((k, int(level)))
        value = float(row[metric])
        out: dict[str, Any] = {
            "detector": row["detector"],
            "kappa": k,
            "level": int(level),
            metric: value,
        }
        if "hyperparams" in model_results.columns and paper_kappa is not None:
            same_detector = paper_kappa.detector == row["detector"]
            out["like_for_like"] = same_detector and paper_kappa.reproduces(
                json.loads(str(row["hyperparams"])))
        if ref is None or ref.empty:
            out.update(n_published=0, position=np.nan, percentile_rank=np.nan,
                       published_best=np.nan, published_median=np.nan, best_model=None)
        else:
            values = ref[metric].to_numpy()
            below, equal = (values < value).sum(), (values == value).sum()
            best = int(values.argmax())
            out.update(
                n_published=int(values.size),
                position=int((values > value).sum()) + 1,
                percentile_rank=100.0 * (below + 0.5 * equal) / values.size,
                published_best=float(values[best]),
                published_median=float(np.median(values)),
                best_model=ref["model"].iloc[best],
            )
        rows.append(out)
    return pd.DataFrame(rows)


def plot_severity_curves(
    df: pd.DataFrame,
    models: Sequence[str],
    kappa: str = "max_logit",
    ax: Any = None,
    *,
    metric: str = "auroc",
    own: dict[str, pd.DataFrame] | None = None,
) -> Any:
    """AUROC against severity level for published ``models`` (the paper's Figure 1).

    ``own``: extra curves, ``{label: CoodBenchmark rows of one detector}``, drawn dashed.
    Returns the matplotlib axes.
    """
    import matplotlib.pyplot as plt

    sub = _select(df, kappa, None)
    unknown = sorted(set(models) - set(sub["model"]))
    if unknown:
        raise UnknownNameError(f"published model (kappa {kappa})", unknown[0], set(sub["model"]))
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    for model in models:
        curve = sub[sub["model"] == model].sort_values("level")
        ax.plot(curve["level"], curve[metric], marker="o", label=model)
    for label, results in (own or {}).items():
        levels = _levels_of(results)
        order = np.argsort(levels.to_numpy(), kind="stable")
        ax.plot(levels.to_numpy()[order], results[metric].to_numpy()[order], marker="s",
                linestyle="--", label=label)
    ax.set_xlabel("severity level (0 = easiest)")
    ax.set_ylabel(metric.upper() if metric == "auroc" else metric)
    ax.set_title(f"C-OOD severity curves, kappa = {_kappa_name(df, kappa)}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax
