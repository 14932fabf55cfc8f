"""Whether a result can stand next to a published value, and exactly what differs when not.

A published row and a row of your results table are compared key by key (:func:`row_checks`):

- detector configuration: the published ``detector``'s ``preset`` hyper-parameters and its
  ``hyperparams``, against the row's ``hyperparams``;
- backbone and weights: ``weights`` (the oodbench specs of exactly those weights) against
  ``model``;
- benchmark: ``benchmark`` against ``benchmark``;
- metric convention: ``metric`` against ``metric`` (``fpr95_id`` against ``fpr95_ood`` is the
  "FPR95 convention");
- detector fit data: ``fit_data`` against ``fit_data``;
- the transform the fit data was read with: the ``evaluation.fit_transform`` of the row's recipe
  (:mod:`oodbench.published.recipes`) against ``fit_transform``, checked only where one side
  names a transform other than the evaluation one (``"eval"``): a recipe that states one, or a
  result read with a training augmentation (against a row whose recipe states none: unknown);
- tuning protocol: ``tuning`` against the ``protocol`` of the row's ``tuning`` record;

and the table's protocol (``TableInfo.protocol``: ID set size, C-OOD levels and window) against
what the results record (:func:`protocol_checks`). Each check is ``same``, ``differs`` or
``unknown`` (one side does not record it). Names are compared exactly: tuning protocols by
their registered names (``held_out_classes``, oodbench's cheaper simulation, is not the tuning
paper's ``held_out_paper``, and neither is ``ood_val``), benchmarks, fit data and metrics by
theirs.

**Pairing rules.** The candidates of a results row are the published rows of

1. the same detector;
2. the same metric (FPR95 in either convention counts as one metric, whose convention is then
   a check of its own: ``fpr95_id`` against ``fpr95_ood`` is the "FPR95 convention");
3. the same kind of group and the same group (:func:`group_kind`): an ID-only metric (ID
   accuracy) pairs only with published ID-only rows and is shown under no OOD group; an
   average (``near``, ``far``, ``all``) only with the same average; one OOD set (``sun``) only
   with that set; a C-OOD level only with that level;

and, in tables whose ``compare_by`` is ``"weights"`` (the C-OOD table: 706 models, placed
among with ``paper rank``), of your own weights only.

**The row shown** (:data:`CHOICE_RULE`): among the candidates, the one with the fewest checks
that differ, then the fewest that are unknown, then one trained with plain cross-entropy
before one trained with a special method (LogitNorm, OE, ...: one more ingredient your model
would need; both fall under the "backbone and weights" check), then the first in catalogue
order (the order of ``oodbench published list``, then the table's own row order). The other candidates are
counted (column ``others``), never silently dropped.

A *match* ("same settings") has no check that differs; a *near-match* lists each difference,
and its published value is withheld ("not comparable: ...") unless the comparison is asked for
anyway (``allow_mismatch``), as ``paper rank`` refuses a C-OOD rank across benchmarks.
:func:`counts` covers every results row: those that match, those with a near-match and those
without a published counterpart (:func:`summary_text`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from oodbench.errors import EmptyInputError, InvalidInputError, OodbenchError
from oodbench.params import Params, canonical, params
from oodbench.published.catalogue import TableInfo, load_all, table_info, tables

STATUSES = ("same", "differs", "unknown")
#: metric -> family: values of one family answer the same question (conventions may differ)
METRIC_FAMILY = {"auroc": "auroc", "fpr95_id": "fpr95", "fpr95_ood": "fpr95",
                 "id_accuracy": "id_accuracy"}
#: metrics of the ID set alone (their published rows have no OOD set)
ID_ONLY_METRICS = ("id_accuracy",)
CONVENTIONS = {"fpr95_id": "ID-positive (fpr95_id: FPR of OOD at 95 % TPR of ID)",
               "fpr95_ood": "OOD-positive (fpr95_ood: FPR of ID at 95 % TPR of OOD, OpenOOD)"}
TUNING_NAMES = {"none": "not tuned", "ood_val": "tuned on an OOD validation set",
                "held_out_classes": "tuned on held-out ID classes (no OOD data)",
                "held_out_paper": "tuned by the tuning paper's Algorithms 1-4 (held-out ID "
                                  "classes, no OOD data)",
                "noise": "tuned on Gaussian-noise images (the tuning paper's baseline, no OOD "
                         "data)",
                "fgsm": "tuned on FGSM-perturbed ID images (the tuning paper's baseline, no OOD "
                        "data)",
                "id_only": "tuned on ID data only"}


#: how the published row shown beside a results row is chosen among its candidates
CHOICE_RULE = ("fewest differing checks, then fewest unknown checks, then a standard "
               "(cross-entropy) training before a special training method, then catalogue order")
#: the text a match's comparison column carries
SAME = "same settings"


@dataclass(frozen=True)
class Check:
    """One item compared: the published value, yours, and ``same`` / ``differs`` / ``unknown``."""

    item: str
    published: str
    yours: str
    status: str

    def text(self) -> str:
        return f"{self.item}: published {self.published}; yours {self.yours}"


def _recorded(results: pd.DataFrame, column: str) -> set[int] | None:
    if column not in results.columns or results[column].isna().all():
        return None
    return {int(v) for v in results[column].dropna()}


def protocol_checks(info: TableInfo, results: pd.DataFrame) -> list[Check]:
    """The table's protocol (``info.protocol``) against what ``results`` record, item by item.

    ``n_levels`` not recorded but ``level`` present: levels beyond the published count differ,
    fewer are ``unknown`` (the total was not recorded).
    """
    checks = []
    for column, value in info.protocol.items():
        label = info.labels.get(column, column)
        found = _recorded(results, column)
        if found is None and column == "n_levels" and "level" in results.columns:
            levels = sorted({int(v) for v in results["level"].dropna()})
            if levels and max(levels) >= value:
                checks.append(Check(label, f"{value}", f"levels up to {max(levels)}", "differs"))
                continue
            checks.append(Check(label, f"{value}", f"levels {levels} (total not recorded)",
                                "unknown"))
            continue
        if found is None:
            checks.append(Check(label, f"{value:,}", "not recorded", "unknown"))
            continue
        shown = ", ".join(f"{v:,}" for v in sorted(found))
        checks.append(Check(label, f"{value:,}", shown, "same" if found == {value} else "differs"))
    return checks


# -- one published row against one results row ------------------------------------------------
def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return canonical(a) == canonical(b)


def wanted_hyperparams(published: Mapping[str, str]) -> dict[str, Any] | None:
    """The hyper-parameters behind a published row: its preset's, then its ``hyperparams``;
    ``None`` when the row states neither."""
    from oodbench.detectors import preset_for

    wanted: dict[str, Any] = {}
    if published["preset"]:
        wanted.update(preset_for(published["detector"], published["preset"]).hyperparams)
    if published["hyperparams"]:
        wanted.update(params(published["hyperparams"]))
    if not published["preset"] and not published["hyperparams"]:
        return None
    return wanted


def _recorded_params(yours: Mapping[str, Any]) -> Params | None:
    """The ``hyperparams`` of a results row (``Params``, a mapping or JSON text); ``None`` when
    the row does not record them."""
    raw = yours.get("hyperparams")
    if raw is None or (isinstance(raw, float) and math.isnan(raw)) or raw is pd.NA or raw == "":
        return None
    return params(raw)


def configuration_check(published: Mapping[str, str], yours: Mapping[str, Any]) -> Check:
    """The detector configuration of a published row (its preset's hyper-parameters and its
    own ``hyperparams``) against the ``hyperparams`` of a results row."""
    wanted = wanted_hyperparams(published)
    shown = f"{published['detector']} ({published['method']})"
    if wanted is None:
        return Check("detector configuration", f"{shown}, configuration not stated",
                     _hyper_text(yours), "unknown")
    text = ", ".join(f"{k}={v}" for k, v in wanted.items()) or "defaults"
    preset = f" preset {published['preset']!r}" if published["preset"] else ""
    published_text = f"{shown}{preset}: {text}"
    have = _recorded_params(yours)
    if have is None:
        return Check("detector configuration", published_text, "hyper-parameters not recorded",
                     "unknown")
    differing = [k for k, v in wanted.items() if not _same_value(have.get(k), v)]
    if not differing:
        return Check("detector configuration", published_text, _hyper_text(yours), "same")
    mine = ", ".join(f"{k}={have.get(k)}" for k in differing)
    return Check("detector configuration", published_text, mine, "differs")


def _hyper_text(yours: Mapping[str, Any]) -> str:
    have = _recorded_params(yours)
    if have is None:
        return f"{yours.get('detector')}"
    return f"{yours.get('detector')}: " + (", ".join(f"{k}={v}" for k, v in have.items())
                                           or "defaults")


def _weights(published: Mapping[str, str], yours: Mapping[str, Any]) -> Check:
    trained = ", ".join(p for p in (published["training"], published["train_data"]) if p)
    specs = [w for w in published["weights"].split(";") if w]
    described = published["backbone"] or "backbone not stated"
    if trained:
        described += f" ({trained})"
    described += f", weights {' or '.join(specs)}" if specs else ", weights oodbench cannot load"
    model = str(yours.get("model", ""))
    return Check("backbone and weights", described, model or "not recorded",
                 "same" if model in specs else "unknown" if not model else "differs")


def _keyed(item: str, published: str, published_text: str, yours: str, yours_text: str) -> Check:
    if not published:
        return Check(item, "not stated", yours_text or "not recorded", "unknown")
    if not yours:
        return Check(item, published_text, "not recorded", "unknown")
    return Check(item, published_text, yours_text, "same" if published == yours else "differs")


def tuning_protocol(tuning: Any) -> str:
    """The protocol of a results row's ``tuning`` record (``Params``, a mapping or JSON text;
    ``"none"`` when not tuned)."""
    try:
        record = params(tuning)
    except (ValueError, TypeError):
        return "unknown"
    return str(record.get("protocol", "unknown")) if record else "none"


#: the tuning protocol of both sides for a detector without a hyper-parameter to tune
NOTHING_TO_TUNE = "nothing to tune"
#: hyper-parameters that choose data, randomness or resources, never tuned
_NOT_TUNED = frozenset({"fit_data", "seed", "batch_size", "chunk_size", "device"})


def nothing_to_tune(detector: str) -> bool:
    """Whether ``detector`` (an oodbench name) has no hyper-parameter a tuning protocol could
    set (MSP, MaxLogit, Mahalanobis, ...): for it, a published row "tuned on an OOD validation
    set" and an untuned result were run the same way."""
    from oodbench import detectors

    try:
        names = detectors.hyperparameter_names(detector)
    except OodbenchError:  # a published detector oodbench does not implement
        return False
    return not set(names) - _NOT_TUNED


def row_checks(published: Mapping[str, str], yours: Mapping[str, Any],
               info: TableInfo | None = None) -> list[Check]:
    """Every key of ``published`` (a catalogue row) against ``yours`` (a long results row)."""
    benchmark = published["benchmark"]
    mine_tuning = tuning_protocol(yours.get("tuning"))
    pub_tuning = published["tuning"]
    if nothing_to_tune(published["detector"]):  # a protocol that tunes nothing changes nothing
        mine_tuning = pub_tuning = NOTHING_TO_TUNE
    mine_metric = str(yours.get("metric", ""))
    both_fpr95 = {METRIC_FAMILY.get(published["metric"]), METRIC_FAMILY.get(mine_metric)} == {"fpr95"}
    checks = [
        configuration_check(published, yours),
        _weights(published, yours),
        _keyed("benchmark", benchmark,
                benchmark + f" ({published['id_set']})" if benchmark
                else f"{published['id_set']} (no oodbench benchmark)",
                str(yours.get("benchmark", "")), str(yours.get("benchmark", ""))),
        _keyed("FPR95 convention" if both_fpr95 else "metric convention", published["metric"],
                CONVENTIONS.get(published["metric"], published["metric"]), mine_metric,
                CONVENTIONS.get(mine_metric, mine_metric)),
        _keyed("detector fit data", published["fit_data"], published["fit_data"],
                _text(yours.get("fit_data")), _text(yours.get("fit_data"))),
        _keyed("tuning protocol", pub_tuning,
                f"{TUNING_NAMES.get(pub_tuning, pub_tuning)}: {published['tuning_detail']}"
                if published["tuning_detail"] else TUNING_NAMES.get(pub_tuning, pub_tuning),
                mine_tuning, TUNING_NAMES.get(mine_tuning, mine_tuning)),
    ]
    transform = fit_transform_check(published, yours)
    if transform is not None:
        checks.append(transform)
    if info is not None:
        checks += protocol_checks(info, pd.DataFrame([dict(yours)]))
    return checks


def _text(value: Any) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value)


def fit_transform_check(published: Mapping[str, Any], yours: Mapping[str, Any]) -> Check | None:
    """The transform the fit data was read with: the published row's (its recipe's
    ``evaluation.fit_transform``, column ``fit_transform``) against the results row's; ``None``
    (no check) when neither names one other than the evaluation transform."""
    from oodbench.models.fit_transforms import DEFAULT_FIT_TRANSFORM

    stated = _text(published.get("fit_transform"))
    mine = _text(yours.get("fit_transform"))
    if not stated and mine in ("", DEFAULT_FIT_TRANSFORM):
        return None
    return _keyed("fit data transform", stated, stated, mine, mine)


# -- a results table against the catalogue ----------------------------------------------------
def _family(metric: str) -> str | None:
    return METRIC_FAMILY.get(metric)


def group_kind(metric: str, group: str) -> str:
    """The kind of a row's group: ``"id"`` for a metric of the ID set alone (its group is
    none), ``"average"`` for OpenOOD's/MOS's means (``near``, ``far``, ``all``), ``"level"``
    for a C-OOD severity level, ``"set"`` for one named OOD set."""
    if metric in ID_ONLY_METRICS:
        return "id"
    if group in ("near", "far", "all"):
        return "average"
    if group.startswith("level_"):
        return "level"
    return "set"


def _group(metric: str, group: str) -> str:
    return "" if group_kind(metric, group) == "id" else group


def candidate_index(published: pd.DataFrame) -> dict[tuple[str, str, str, str], pd.DataFrame]:
    """The published rows by (detector, group kind, group, metric family): the rows a results
    row with those keys can be compared with (built once per comparison)."""
    keyed = published.assign(
        _family=published["metric"].map(_family),
        _kind=[group_kind(m, g) for m, g in zip(published["metric"], published["ood_set"])],
        _group=[_group(m, g) for m, g in zip(published["metric"], published["ood_set"])])
    return {key: rows.drop(columns=["_family", "_kind", "_group"])
            for key, rows in keyed.groupby(["detector", "_kind", "_group", "_family"])}


@functools.lru_cache(maxsize=4)
def _published(names: tuple[str, ...]) -> tuple[pd.DataFrame, dict[tuple[str, str, str, str], pd.DataFrame]]:
    """The bundled published rows of ``names`` and their :func:`candidate_index` (the tables
    never change in a process: built once)."""
    published = with_fit_transforms(load_all(list(names)))
    return published, candidate_index(published)


def with_fit_transforms(published: pd.DataFrame) -> pd.DataFrame:
    """``published`` with the column ``fit_transform``: the ``evaluation.fit_transform`` its
    row's recipe states (``""``: none stated, or no recipe)."""
    from oodbench.published.recipes import recipes, row_recipes

    stated = {rid: str(r.value("evaluation", "fit_transform", "")) for rid, r in recipes().items()}
    return published.assign(fit_transform=row_recipes(published).map(lambda rid: stated.get(rid, "")))


def candidates(index: Mapping[tuple[str, str, str, str], pd.DataFrame],
               yours: Mapping[str, Any]) -> pd.DataFrame | None:
    """The published rows a results row could be compared with (the pairing rules of the
    module docstring); ``None`` when there are none."""
    metric = str(yours.get("metric", ""))
    family = _family(metric)
    group = str(yours.get("group", "") or "")
    rows = index.get((str(yours.get("detector", "")), group_kind(metric, group),
                      _group(metric, group), family or ""))
    if family is None or rows is None:
        return None
    by_weights = [name for name, info in tables().items() if info.compare_by == "weights"]
    if by_weights:
        model = str(yours.get("model", ""))
        own = rows["weights"].str.split(";").map(lambda specs: model in specs)
        rows = rows[~rows["table"].isin(by_weights) | own]
    return rows if len(rows) else None


def _choose(scored: list[tuple[int, int, int, int, dict[str, Any], list[Check]]]
            ) -> tuple[dict[str, Any], list[Check]]:
    """The candidate :data:`CHOICE_RULE` picks: (differences, unknowns, special training,
    catalogue position)."""
    *_, pub, checks = min(scored, key=lambda s: s[:4])
    return pub, checks


def special_training(published: Mapping[str, Any]) -> int:
    """1 when the published row's model was trained with a special method, 0 for plain
    cross-entropy (or no training recorded)."""
    training = str(published.get("training") or "").strip().lower()
    return 0 if not training or training.startswith("cross-entropy") else 1


def display_value(value: float, unit: str, printed: str) -> str:
    """Your value in the published unit, with as many decimals as the published one."""
    scaled = 100.0 * value if unit == "%" else value
    decimals = len(printed.split(".", 1)[1]) if "." in printed else 0
    return f"{scaled:.{max(decimals, 2)}f}"


def compare(
    results: pd.DataFrame,
    *,
    tables_: Sequence[str] | None = None,
    allow_mismatch: bool = False,
) -> pd.DataFrame:
    """Each results row next to the published row it can be compared with.

    ``results``: long rows of a results table (``oodbench run``: columns ``model``,
    ``detector``, ``hyperparams``, ``benchmark``, ``group``, ``metric``, ``value``, ``n_id``,
    ``preset``, ``fit_data``, ``tuning``; only ``ok`` rows are used). Returns one row per
    results row that has a candidate: ``model``, ``detector``, ``benchmark``, ``group``,
    ``metric``, ``yours`` (your value in the published unit), ``published`` (as printed; empty
    for a near-match unless ``allow_mismatch``), ``status`` (``match`` / ``near-match``),
    ``comparison`` (``same settings`` or ``not comparable: <what differs>``), ``differs`` (the
    items that differ, ``"; "``-joined: what a summary counts near-matches by), ``unknown`` (what
    could not be checked), ``others`` (the other candidates, not shown: :data:`CHOICE_RULE`),
    ``table``, ``published_method``, ``paper``, ``read_from``. ``attrs["rows"]``
    holds the number of results rows compared (:func:`counts`). Raises ``EmptyInputError``
    saying why when no row has a published counterpart.
    """
    rows = results
    if "status" in rows.columns:
        rows = rows[rows["status"] == "ok"]
    needed = {"model", "detector", "benchmark", "group", "metric", "value"}
    missing = sorted(needed - set(rows.columns))
    if missing:
        raise InvalidInputError(
            f"results rows need the columns {sorted(needed)} (the long table of `oodbench run`); "
            f"missing {missing}"
        )
    if rows.empty:
        raise EmptyInputError("no finished results rows to compare (no row has status 'ok')")
    names = list(tables()) if tables_ is None else [table_info(n).name for n in tables_]
    published, index = _published(tuple(names))
    position = {n: i for i, n in enumerate(tables())}
    infos = {n: table_info(n) for n in names}
    out = []
    seen_id_only: set[tuple[str, ...]] = set()
    n_rows = 0
    for yours in rows.to_dict(orient="records"):
        if yours["metric"] in ID_ONLY_METRICS:  # one value per cell, whatever its OOD group
            key = tuple(canonical(yours.get(k)) for k in ("model", "detector", "hyperparams",
                                                         "benchmark", "metric"))
            if key in seen_id_only:
                continue
            seen_id_only.add(key)
        n_rows += 1
        options = candidates(index, yours)
        if options is None:
            continue
        scored = []
        for idx, pub in zip(options.index, options.to_dict(orient="records")):
            checks = row_checks(pub, yours, infos[pub["table"]])
            scored.append((sum(c.status == "differs" for c in checks),
                           sum(c.status == "unknown" for c in checks), special_training(pub),
                           position[pub["table"]] * 10**9 + int(idx), pub, checks))
        pub, checks = _choose(scored)
        differs = [c for c in checks if c.status == "differs"]
        unknown = [c.item for c in checks if c.status == "unknown"]
        shown = not differs or allow_mismatch
        out.append({
            "model": yours["model"], "detector": yours["detector"],
            "benchmark": yours["benchmark"], "group": _group(str(yours["metric"]),
                                                             str(yours["group"] or "")),
            "metric": yours["metric"],
            "yours": display_value(float(yours["value"]), pub["unit"], pub["value"]),
            "published": pub["value"] if shown else "",
            "unit": pub["unit"],
            "status": "near-match" if differs else "match",
            "comparison": (SAME if not differs else
                           "not comparable: " + "; ".join(c.text() for c in differs)),
            "differs": "; ".join(c.item for c in differs),
            "unknown": ", ".join(unknown),
            "others": len(scored) - 1,
            "table": pub["table"], "published_method": pub["method"], "paper": pub["paper"],
            "read_from": pub["read_from"],
        })
    if not out:
        raise EmptyInputError(nothing_matched(rows, published))
    result = pd.DataFrame(out)
    result.attrs["rows"] = n_rows
    return result


def counts(compared: pd.DataFrame) -> dict[str, int]:
    """Every results row compared (:func:`compare`) counted: ``rows`` (each row once; an ID-only
    metric once per cell), ``match``, ``near-match`` and ``none`` (no published counterpart)."""
    total = int(compared.attrs.get("rows", len(compared)))
    match = int((compared["status"] == "match").sum())
    near = int((compared["status"] == "near-match").sum())
    return {"rows": total, "match": match, "near-match": near, "none": total - match - near}


def summary_text(compared: pd.DataFrame) -> str:
    """``"3 of 4,524 rows match; 49 have a near-match; 4,472 have no published counterpart"``."""
    c = counts(compared)

    def have(n: int) -> str:
        return f"{n:,} {'has' if n == 1 else 'have'}"

    return (f"{c['match']:,} of {c['rows']:,} rows match; {have(c['near-match'])} a "
            f"near-match; {have(c['none'])} no published counterpart")


def nothing_matched(rows: pd.DataFrame, published: pd.DataFrame) -> str:
    """Why no results row has a published counterpart, in one line: per detector of yours,
    your OOD sets and the published ones."""
    detectors = sorted(set(rows["detector"].astype(str)))
    have = published[published["detector"].isin(detectors)]
    if have.empty:
        return (f"nothing to compare: no published row uses your detectors {detectors} "
                f"(published detectors: {_few(published['detector'])})")
    parts = []
    for det in detectors:
        mine = _few(rows[rows["detector"].astype(str) == det]["group"])
        theirs = _few(have[have["detector"] == det]["ood_set"]) or "none"
        parts.append(f"{det} on {mine} (published: {theirs})")
    metrics = sorted(set(rows["metric"].astype(str)))
    return ("nothing to compare: a comparison needs the same detector, OOD set and metric; "
            f"yours: {'; '.join(parts)}; metrics {metrics} "
            "(see `oodbench published show TABLE`)")


def _few(values: Iterable[str], limit: int = 12) -> str:
    names = sorted({str(v) for v in values if str(v)})
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
