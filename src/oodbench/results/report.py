"""The report of a results folder: one self-contained HTML file and a Markdown summary.

    write_report("results/resnets")   # -> results/resnets/report.html and report.md

The HTML embeds every figure as a base64 PNG and its CSS inline, so the single file can be
mailed or attached to a review. It holds, per benchmark: the leaderboard (best first; each
column's best value highlighted; both FPR@95 conventions named), the severity curves (C-OOD:
AUROC against level per model: the best detectors in colour, the others light) or the AUROC
grid of detectors x OOD groups, near/far means where groups are labelled, the per-group table;
then the published results each row can be compared with (:mod:`oodbench.published`: the
published value beside each match; the near-matches counted by what differs, their row by row
"not comparable: what differs" collapsed), ID-against-OOD score histograms of chosen (model,
detector) pairs, the failures and skipped cells, and the run's configuration and package
versions. It shows the cells of the experiment last run into the folder and says how many cells
of earlier versions it leaves out (``include_earlier=True``, ``--all``: shown, labelled).
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oodbench.errors import MissingDataError
from oodbench.params import params
from oodbench.results import leaderboard as lb
from oodbench.results import plots
from oodbench.results.significance import versus_above
from oodbench.results.table import (
    FILE_NAME,
    STORE_DIR,
    ResultsTable,
    ResultsView,
    check_writable,
    now,
    writing,
)

_TEST_NOTE = ("'vs above': the mean-AUROC difference to the row above and the p-value of "
              "DeLong's test on the kept scores (paired on shared samples); (n.s.) marks a "
              "difference that is not significant at 5 %.")
#: at most this many score histograms are drawn when the pairs are not given
MAX_DEFAULT_HISTOGRAMS = 8
#: unreadable images named per source (the rest are counted)
SHOWN_SKIPPED = 10
_BASELINE = "msp"

_CSS = """
:root { --ink:#1d2433; --muted:#5b6474; --line:#dde1e8; --accent:#2456a6; --best:#e3f4e1; }
* { box-sizing: border-box; }
body { font: 14px/1.5 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--ink); margin: 0; background: #f6f7f9; }
main { max-width: 1640px; margin: 0 auto; padding: 24px 32px 64px; background: #fff;
       min-height: 100vh; box-shadow: 0 0 0 1px var(--line); }
h1 { font-size: 26px; margin: 8px 0 4px; }
h2 { font-size: 20px; margin: 36px 0 8px; padding-bottom: 4px; border-bottom: 2px solid var(--accent); }
h3 { font-size: 15px; margin: 22px 0 6px; color: var(--accent); }
p.meta, p.note { color: var(--muted); margin: 4px 0 10px; }
nav { margin: 12px 0 4px; } nav a { margin-right: 14px; color: var(--accent); text-decoration: none; }
.cards { display: flex; gap: 12px; flex-wrap: wrap; margin: 14px 0; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 8px 14px; min-width: 120px; }
.card b { display: block; font-size: 20px; } .card span { color: var(--muted); font-size: 12px; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; }
th, td { padding: 4px 10px; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
th { background: #eef1f6; position: sticky; top: 0; font-weight: 600; }
td.text, th.text { text-align: left; }
td.text { white-space: normal; min-width: 8em; max-width: 26em; overflow-wrap: anywhere; }
tbody tr:hover { background: #f3f6fb; }
td.best { background: var(--best); font-weight: 700; }
td.err { white-space: normal; text-align: left; max-width: 640px; font-family: ui-monospace, monospace; font-size: 12px; }
.scroll { overflow-x: auto; }
figure { margin: 10px 0 18px; } figure img { max-width: 100%; border: 1px solid var(--line); border-radius: 4px; }
figcaption { color: var(--muted); font-size: 12px; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 12px; }
pre { background: #f3f4f7; border: 1px solid var(--line); border-radius: 4px; padding: 10px; overflow-x: auto; font-size: 12px; }
details summary { cursor: pointer; color: var(--accent); margin: 8px 0; }
.ok { color: #1f7a35; } .bad { color: #b42318; }
"""


@dataclass(frozen=True)
class ReportFiles:
    """The files ``write_report`` wrote."""

    html: Path
    markdown: Path
    view: ResultsView  # the rows the report shows, and the earlier cells it leaves out


def write_report(
    results: str | Path,
    *,
    out: str | Path | None = None,
    histograms: Sequence[tuple[str, str]] | None = None,
    title: str | None = None,
    include_earlier: bool = False,
    figures: bool = True,
) -> ReportFiles:
    """Write ``report.html`` and ``report.md`` for a results folder (into ``out``, default the folder).

    Args:
        results: the output folder of ``oodbench run`` (it holds ``results/``).
        histograms: (model, detector) pairs whose ID-against-OOD score histograms to draw, for
            every benchmark; default: each model's best detector per benchmark and the MSP
            baseline (at most ``MAX_DEFAULT_HISTOGRAMS``).
        title: the report's title (default: the experiment's name).
        include_earlier: also the cells of earlier versions of the experiment (labelled);
            by default the report shows the experiment last run into the folder and says how
            many earlier cells it leaves out.
        figures: draw the figures (severity curves or heat maps, score histograms); without
            them the report has the same tables and says the figures were left out, in a
            fraction of the time (matplotlib draws each figure in about 0.2-0.5 s).
    """
    folder = Path(results)
    table = ResultsTable(folder)
    if not table.exists():
        raise MissingDataError(
            f"no results in {folder} (no {STORE_DIR}/ folder, no {FILE_NAME}); pass the output "
            "folder of `oodbench run` (the [experiment] output of the experiment file)"
        )
    view = table.view(include_earlier=include_earlier)
    rows = view.rows
    config = _configuration(folder)
    name = title or _experiment_name(rows) or folder.name
    target = Path(out) if out is not None else folder
    fix = "pass another folder with --out DIR (out= in Python), or make this one writable"
    check_writable(target, "the report", fix)  # before the figures are drawn
    published = published_comparison(rows)  # once, for both files
    boards = leaderboards(rows, table)  # once, for both files (each DeLong test reads scores)
    page = render_html(rows, table=table, title=name, configuration=config, histograms=histograms,
                       note=view.note, published=published, figures=figures, boards=boards)
    html_path, md_path = target / "report.html", target / "report.md"
    with writing(target, "the report", fix):
        html_path.write_text(page, encoding="utf-8")
        md_path.write_text(render_markdown(rows, title=name, html_name=html_path.name, table=table,
                                           note=view.note, published=published, boards=boards),
                           encoding="utf-8")
    return ReportFiles(html_path, md_path, view)


# -- HTML -----------------------------------------------------------------------------------
def render_html(
    rows: pd.DataFrame,
    *,
    table: ResultsTable | None = None,
    title: str = "oodbench report",
    configuration: str = "",
    histograms: Sequence[tuple[str, str]] | None = None,
    note: str = "",
    published: PublishedComparison | None = None,
    figures: bool = True,
    boards: Mapping[str, pd.DataFrame] | None = None,
) -> str:
    """The whole report as one HTML string (figures inline); ``note``: the line about the
    cells of earlier versions of the experiment (:attr:`ResultsView.note`); ``published``: the
    comparison with the published results (computed when not given); ``figures=False``: the
    tables only, each figure section saying so; ``boards``: :func:`leaderboards` of ``rows``
    (computed when not given)."""
    names = lb.benchmarks(rows)
    boards = boards if boards is not None else leaderboards(rows, table)
    skipped_images = table.skipped_images() if table is not None else {}
    parts = [f"<h1>{_e(title)}</h1>", _summary_html(rows, skipped_images, note)]
    nav = [(f"bench-{i}", n) for i, n in enumerate(names)]
    nav += [("published", "Published results"), ("histograms", "Score distributions"),
            ("failures", "Failures"), ("configuration", "Configuration")]
    parts.append("<nav>" + "".join(f'<a href="#{a}">{_e(t)}</a>' for a, t in nav) + "</nav>")
    for i, name in enumerate(names):
        parts.append(_benchmark_html(rows, name, f"bench-{i}", boards[name], figures))
    parts.append(_tuning_html(rows))
    parts.append(_published_html(published or published_comparison(rows)))
    parts.append(_histograms_html(rows, table, histograms, figures))
    parts.append(_problems_html(rows, skipped_images))
    parts.append(_configuration_html(rows, configuration))
    body = "\n".join(parts)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{_e(title)}</title><style>{_CSS}</style></head>"
        f"<body><main>\n{body}\n</main></body></html>\n"
    )


def _summary_html(rows: pd.DataFrame, skipped_images: dict[str, dict[str, Any]],
                  note: str = "") -> str:
    cells = rows.drop_duplicates("cell")
    counts = cells["status"].value_counts()
    cards = [
        (rows["model"][rows["status"] == "ok"].nunique(), "models"),
        (rows["detector"][rows["status"] == "ok"].nunique(), "detectors"),
        (len(lb.benchmarks(rows)), "benchmarks"),
        (int(counts.get("ok", 0)), "cells finished"),
        (int(counts.get("failed", 0)), "cells failed"),
        (int(counts.get("skipped", 0)), "cells skipped"),
        (sum(len(e["skipped"]) for e in skipped_images.values()), "unreadable images skipped"),
    ]
    html_cards = "".join(f"<div class=card><b>{v}</b><span>{_e(t)}</span></div>" for v, t in cards)
    return (
        f"<p class=meta>Generated {now()[:19].replace('T', ' ')} UTC by oodbench from "
        f"{len(rows)} result rows. Scores are confidences (higher = more in-distribution); "
        "ID is the positive class for AUROC.</p>"
        f"<div class=cards>{html_cards}</div>"
        + (f"<p class=note>{_e(note)}</p>" if note else "")
    )


def _with_tests(rows: pd.DataFrame, name: str, table: ResultsTable | None) -> pd.DataFrame:
    """The leaderboard plus ``vs_above``: the DeLong test against the row above (kept scores)."""
    board = lb.leaderboard(rows, name)
    if table is not None and len(board) > 1:
        board["vs_above"] = versus_above(rows, name, board, table)
    return board


def leaderboards(rows: pd.DataFrame, table: ResultsTable | None) -> dict[str, pd.DataFrame]:
    """Each benchmark's leaderboard with its ``vs_above`` tests, by benchmark name: computed once
    for the HTML and the Markdown of one report."""
    return {name: _with_tests(rows, name, table) for name in lb.benchmarks(rows)}


#: what a figure section says in a report written without figures
NO_FIGURES = "<p class=note>Figures left out (written with --no-figures).</p>"


def _benchmark_html(rows: pd.DataFrame, name: str, anchor: str, board: pd.DataFrame,
                    figures: bool = True) -> str:
    """One benchmark's section; ``board``: its leaderboard with the tests (:func:`leaderboards`)."""
    severity = lb.is_severity(rows, name)
    n_groups = int(board["groups"].max()) if len(board) else 0
    what = f"{n_groups} severity levels" if severity else f"{n_groups} OOD groups"
    out = [
        f'<section id="{anchor}"><h2>{_e(name)}</h2>',
        f"<p class=note>Leaderboard: each metric is the unweighted mean over the benchmark's "
        f"{what}, best AUROC first; the best value of each column is highlighted. FPR@95 (ID "
        "positive): share of OOD accepted at the threshold that keeps 95 % of ID; FPR@95 (OOD "
        "positive, OpenOOD): share of ID rejected at the threshold that catches 95 % of OOD. "
        f"{_TEST_NOTE}</p>",
        "<h3>Leaderboard</h3>",
        _table_html(board, ["rank", "model", "label", *lb.DEFAULT_METRICS, "id_accuracy",
                            "vs_above"]),
    ]
    models = list(dict.fromkeys(board["model"]))
    drawn = []
    for model in models if figures else []:
        fig = (plots.severity_curves(rows, name, model) if severity
               else plots.group_heatmap(rows, name, model))
        if fig is not None:
            caption = (severity_caption(rows, name, model) if severity
                       else "AUROC per detector and OOD group")
            drawn.append(_figure_html(fig, f"{model}: {caption}"))
    heading = "Severity curves" if severity else "AUROC per OOD group"
    out += [f"<h3>{heading}</h3>", *(drawn if figures else [NO_FIGURES])]
    nf = lb.near_far(rows, name)
    if len(nf):
        out += ["<h3>Near-OOD and far-OOD means</h3>",
                _table_html(nf, ["model", "label", *[c for c in nf.columns if c.endswith((" near", " far"))]])]
    groups = lb.by_group(rows, name, "auroc")
    out += [f"<details><summary>AUROC per {'level' if severity else 'group'} (table)</summary>",
            _table_html(groups, ["model", "label", *[c for c in groups.columns
                                                      if c not in (*lb.KEYS, "label")]],
                        higher_is_better=True), "</details></section>"]
    return "\n".join(out)


def severity_caption(rows: pd.DataFrame, benchmark: str, model: str) -> str:
    """What the severity-curve figure of ``model`` shows (:func:`plots.severity_curves`)."""
    n = int(lb.leaderboard(rows, benchmark).query("model == @model").shape[0])
    if n <= plots.ALL_COLOURED:
        return ("AUROC against severity level, one line per detector (thick: best three by mean "
                "AUROC; error bars: 95 % DeLong intervals)")
    return (f"AUROC against severity level: the {plots.HIGHLIGHT} best of {n} detectors by mean "
            "AUROC in colour (thick: best three; error bars: 95 % DeLong intervals), the other "
            f"{n - plots.HIGHLIGHT} in light grey (the leaderboard and the per-level table above "
            "and below give every value)")


#: the columns of a match (the published value beside yours)
PUBLISHED_COLUMNS = ("model", "detector", "benchmark", "group", "metric", "yours", "published",
                     "unit", "published_method", "table")
#: the columns of a near-match (row by row, collapsed)
NEAR_COLUMNS = ("model", "detector", "benchmark", "group", "metric", "yours", "unit",
                "published_method", "table", "comparison")


@dataclass(frozen=True)
class PublishedComparison:
    """The results rows beside the published rows (:func:`oodbench.published.compare`): the
    matches, the near-matches, the near-matches counted by what differs, and a sentence saying
    how to read them (or why there is nothing to compare)."""

    compared: pd.DataFrame
    note: str

    @property
    def matches(self) -> pd.DataFrame:
        return self._with_status("match")

    @property
    def near(self) -> pd.DataFrame:
        return self._with_status("near-match")

    def _with_status(self, status: str) -> pd.DataFrame:
        """The rows of ``status``, ordered by what they are (model, detector, benchmark, group,
        metric, published table): not by the cells' keys, which hold the weights' path, so two
        runs of one experiment into two folders list them alike."""
        if self.compared.empty:
            return self.compared
        rows = self.compared[self.compared["status"] == status]
        order = [c for c in ("model", "detector", "benchmark", "group", "metric", "table")
                 if c in rows.columns]
        return rows.sort_values(order, key=lambda c: c.astype(str), kind="stable"
                                ).reset_index(drop=True)

    def reasons(self) -> pd.DataFrame:
        """One row per set of differing items: how many near-matches, of which detectors and
        published tables (most frequent first)."""
        near = self.near
        if near.empty:
            return pd.DataFrame(columns=["what differs", "rows", "detectors", "tables"])
        grouped = near.groupby("differs", sort=False)
        out = pd.DataFrame({
            "what differs": list(grouped.groups),
            "rows": grouped.size().to_numpy(),
            "detectors": [", ".join(sorted(set(g["detector"].astype(str)))) for _, g in grouped],
            "tables": [", ".join(sorted(set(g["table"].astype(str)))) for _, g in grouped],
        })
        out = out.sort_values("what differs", kind="stable")  # ties: in the order of the text
        return out.sort_values("rows", ascending=False, kind="stable").reset_index(drop=True)


def published_comparison(rows: pd.DataFrame) -> PublishedComparison:
    """The results rows beside the published rows they can be compared with."""
    from oodbench.errors import EmptyInputError
    from oodbench.published import compare

    try:
        compared = compare(rows)
    except EmptyInputError as err:
        return PublishedComparison(pd.DataFrame(columns=[*NEAR_COLUMNS, "status", "differs"]),
                                   str(err))
    from oodbench.published.compare import counts, summary_text

    n_near = counts(compared)["near-match"]
    note = (f"{summary_text(compared)} (counted over every result row). A match has the same "
            "detector configuration, weights, benchmark and OOD set, metric convention, fit "
            "data, tuning protocol and ID set: the published value stands beside yours."
            + (f" {n_near:,} {'is a near-match' if n_near == 1 else 'are near-matches'}, counted "
               "below by what differs; their published value is withheld (`oodbench published "
               "compare --allow-mismatch` shows it)." if n_near else ""))
    return PublishedComparison(compared, note)


def _published_html(published: PublishedComparison) -> str:
    out = ['<section id="published"><h2>Published results</h2>',
           f"<p class=note>{_e(published.note)}</p>"]
    if len(published.matches):
        out += ["<h3>Matches</h3>", _table_html(published.matches, PUBLISHED_COLUMNS)]
    near = published.near
    if len(near):
        out += ["<h3>Near-matches, by what differs</h3>",
                _table_html(published.reasons(), ["what differs", "rows", "detectors", "tables"]),
                f"<details><summary>The {len(near)} near-matches, row by row</summary>",
                _table_html(near, NEAR_COLUMNS), "</details>"]
    return "\n".join(out + ["</section>"])


def _published_markdown(published: PublishedComparison) -> list[str]:
    out = ["## Published results", "", published.note, ""]
    if len(published.matches):
        out += [_markdown_table(published.matches, PUBLISHED_COLUMNS), ""]
    near = published.near
    if len(near):
        out += ["Near-matches, by what differs:", "",
                _markdown_table(published.reasons(), ["what differs", "rows", "detectors",
                                                      "tables"]), "",
                f"<details><summary>The {len(near)} near-matches, row by row</summary>", "",
                _markdown_table(near, NEAR_COLUMNS), "", "</details>", ""]
    return out


def _histograms_html(
    rows: pd.DataFrame, table: ResultsTable | None, pairs: Sequence[tuple[str, str]] | None,
    figures: bool = True,
) -> str:
    out = ['<section id="histograms"><h2>Score distributions</h2>']
    if not figures:
        return "\n".join([*out, NO_FIGURES, "</section>"])
    drawn = []
    if table is not None:
        for cell, label in _histogram_cells(rows, pairs):
            scores = table.load_scores(cell)
            if scores is None:
                continue
            id_scores, ood = scores
            fig = plots.score_histogram(id_scores, ood, title=label)
            drawn.append(_figure_html(fig, f"ID against OOD scores: {label}"))
    if drawn:
        out += ["<p class=note>Densities of the detector's score on the ID test set (grey) and "
                "on OOD groups (C-OOD: the easiest to the hardest level). Less overlap = better "
                "detection.</p>", "<div class=grid>", *drawn, "</div>"]
    else:
        out.append("<p class=note>No per-sample scores were kept for the chosen pairs.</p>")
    return "\n".join(out + ["</section>"])


def _histogram_cells(
    rows: pd.DataFrame, pairs: Sequence[tuple[str, str]] | None
) -> list[tuple[str, str]]:
    """``(cell key, caption)`` of the histograms to draw."""
    ok = lb.ok_rows(rows)
    chosen: list[tuple[str, str]] = []
    for bench in lb.benchmarks(rows):
        board = lb.leaderboard(rows, bench)
        if pairs is None:
            picks = []
            for model in dict.fromkeys(board["model"]):
                mine = board[board["model"] == model]
                picks.append((model, mine["detector"].iloc[0], mine["hyperparams"].iloc[0]))
                base = mine[mine["detector"] == _BASELINE]
                if len(base) and base["detector"].iloc[0] != mine["detector"].iloc[0]:
                    picks.append((model, _BASELINE, base["hyperparams"].iloc[0]))
        else:
            picks = [(m, d, h) for m, d in pairs
                     for h in board[(board["model"] == m) & (board["detector"] == d)]["hyperparams"]]
        for model, det, hp in picks:
            match = ok[(ok["benchmark"] == bench) & (ok["model"] == model)
                       & (ok["detector"] == det) & ok["hyperparams"].isin([hp])]
            if len(match):
                chosen.append((str(match["cell"].iloc[0]), f"{model} · {det} · {bench}"))
    return chosen if pairs is not None else chosen[:MAX_DEFAULT_HISTOGRAMS]


def tuned_cells(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per tuned cell: model, detector, benchmark, protocol, search, criterion, the
    chosen hyper-parameters and the criterion's value there (from the ``tuning`` column)."""
    if "tuning" not in rows:
        return pd.DataFrame()
    records = rows["tuning"].map(params)
    tuned = rows[records.map(bool)].drop_duplicates("cell")
    out = []
    for r in tuned.itertuples():
        record = params(r.tuning)
        out.append({"model": r.model, "detector": r.detector, "benchmark": r.benchmark,
                    "protocol": record.get("protocol", ""), "search": record.get("search", ""),
                    "criterion": record.get("criterion", ""),
                    "chosen": ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                        for k, v in record.get("best_params", {}).items()),
                    "value": record.get("best_value")})
    return pd.DataFrame(out)


def _tuning_html(rows: pd.DataFrame) -> str:
    tuned = tuned_cells(rows)
    if tuned.empty:
        return ""
    return ("<section id=\"tuning\"><h2>Tuned hyper-parameters</h2><p class=note>Chosen at run "
            "time by oodbench.tune: protocol ood_val (an OOD validation set) or held_out_classes "
            "(no OOD data; withheld ID classes); value = the criterion at the chosen point "
            "(held_out_classes: its mean over the variants).</p>"
            + _table_html(tuned, list(tuned.columns), higher_is_better=None) + "</section>")


def _problems_html(rows: pd.DataFrame, skipped_images: dict[str, dict[str, Any]]) -> str:
    out = ['<section id="failures"><h2>Failures</h2>']
    failed = lb.problems(rows, "failed")
    if failed.empty:
        out.append("<p class='note ok'>No cell failed.</p>")
    else:
        out += [f"<p class='note bad'>{len(failed)} cell(s) failed; the full tracebacks are in "
                "failures.log next to the results.</p>", _problems_table(failed)]
    skipped = lb.problems(rows, "skipped")
    if len(skipped):
        out += ["<h3>Skipped (detector does not apply)</h3>", _problems_table(skipped)]
    if skipped_images:
        out += ["<h3>Unreadable images (skipped; absent from every number above)</h3>",
                _skipped_images_table(skipped_images)]
    return "\n".join(out + ["</section>"])


def skipped_image_lines(skipped_images: dict[str, dict[str, Any]]) -> list[str]:
    """One line per source: ``source: 2 of 60 images skipped: a.png (reason); ...``."""
    lines = []
    for entry in sorted(skipped_images.values(), key=lambda e: str(e["source"])):
        records = entry["skipped"]
        shown = "; ".join(f"{r['id']} ({r['reason']})" for r in records[:SHOWN_SKIPPED])
        more = f"; and {len(records) - SHOWN_SKIPPED} more" if len(records) > SHOWN_SKIPPED else ""
        lines.append(f"{entry['source']}: {len(records)} of {entry['n_source']} images skipped: "
                     f"{shown}{more}")
    return lines


def _skipped_images_table(skipped_images: dict[str, dict[str, Any]]) -> str:
    head = "".join(f"<th class=text>{h}</th>" for h in ("source", "skipped", "images (reason)"))
    body = ""
    for line in skipped_image_lines(skipped_images):
        source, count, files = line.split(": ", 2)
        body += (f"<tr><td class=text>{_e(source)}</td><td class=text>{_e(count)}</td>"
                 f"<td class=err>{_e(files)}</td></tr>")
    return f"<div class=scroll><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _problems_table(rows: pd.DataFrame) -> str:
    head = "".join(f"<th class=text>{h}</th>" for h in ("model", "detector", "benchmark", "message"))
    body = "".join(
        f"<tr><td class=text>{_e(r.model)}</td><td class=text>{_e(r.detector)}</td>"
        f"<td class=text>{_e(r.benchmark)}</td><td class=err>{_e(r.error)}</td></tr>"
        for r in rows.itertuples()
    )
    return f"<div class=scroll><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _configuration_html(rows: pd.DataFrame, configuration: str) -> str:
    versions = sorted(set(rows["versions"].map(params)))
    pretty = [", ".join(f"{k} {v}" for k, v in v.items()) for v in versions if v]
    out = ['<section id="configuration"><h2>Configuration</h2>']
    out.append(f"<pre>{_e(configuration)}</pre>" if configuration
               else "<p class=note>No experiment file next to the results.</p>")
    out.append("<h3>Package versions</h3>" + "".join(f"<p class=meta>{_e(p)}</p>" for p in pretty))
    return "\n".join(out + ["</section>"])


def _table_html(df: pd.DataFrame, columns: Sequence[str], *, higher_is_better: bool | None = None) -> str:
    """A table with each numeric column's best value highlighted (direction per metric)."""
    columns = [c for c in columns if c in df.columns]
    best: dict[str, float] = {}
    for col in columns:
        if col == "rank" or not pd.api.types.is_numeric_dtype(df[col]) or df[col].nunique() < 2:
            continue
        metric = col.split()[0]
        up = higher_is_better if higher_is_better is not None else lb.HIGHER_IS_BETTER.get(metric)
        if up is not None:
            best[col] = float(df[col].max() if up else df[col].min())
    head = "".join(f"<th class={'text' if _is_text(df, c) else 'num'}>{_e(_header(c))}</th>"
                   for c in columns)
    body = []
    for _, row in df.iterrows():
        cells = []
        for col in columns:
            value = row[col]
            if _is_text(df, col):
                cells.append(f"<td class=text>{_e(value)}</td>")
            else:
                mark = " class=best" if col in best and _close(value, best[col]) else ""
                cells.append(f"<td{mark}>{_number(value, col)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<div class=scroll><table><thead><tr>{head}</tr></thead><tbody>"
            + "".join(body) + "</tbody></table></div>")


def _figure_html(fig: object, caption: str) -> str:
    data = base64.b64encode(plots.to_png(fig)).decode("ascii")  # type: ignore[arg-type]
    return (f'<figure><img alt="{_e(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>")


# -- Markdown -------------------------------------------------------------------------------
def render_markdown(rows: pd.DataFrame, *, title: str = "oodbench report",
                    html_name: str = "report.html", table: ResultsTable | None = None,
                    note: str = "", published: PublishedComparison | None = None,
                    boards: Mapping[str, pd.DataFrame] | None = None) -> str:
    """A Markdown summary: leaderboards, near/far means, failures and unreadable images (figures
    are in the HTML); ``boards``: :func:`leaderboards` of ``rows`` (computed when not given)."""
    boards = boards if boards is not None else leaderboards(rows, table)
    cells = rows.drop_duplicates("cell")["status"].value_counts()
    out = [f"# {title}", "",
           f"{int(cells.get('ok', 0))} cells finished, {int(cells.get('failed', 0))} failed, "
           f"{int(cells.get('skipped', 0))} skipped. Figures and details: [{html_name}]({html_name}).",
           *(["", note] if note else []),
           "", "Scores are confidences (higher = more in-distribution). Leaderboard values are "
           "means over each benchmark's OOD groups (C-OOD: severity levels).", ""]
    for name in lb.benchmarks(rows):
        board = boards[name]
        out += [f"## {name}", "", _markdown_table(board, ["rank", "model", "label",
                                                          *lb.DEFAULT_METRICS, "id_accuracy",
                                                          "vs_above"]), ""]
        if "vs_above" in board:
            out += [_TEST_NOTE, ""]
        nf = lb.near_far(rows, name)
        if len(nf):
            out += ["Near-OOD and far-OOD means:", "",
                    _markdown_table(nf, ["model", "label", *[c for c in nf.columns
                                                             if c.endswith((" near", " far"))]]), ""]
    tuned = tuned_cells(rows)
    if len(tuned):
        out += ["## Tuned hyper-parameters", "", _markdown_table(tuned, list(tuned.columns)), ""]
    out += _published_markdown(published or published_comparison(rows))
    failed = lb.problems(rows, "failed")
    out += ["## Failures", ""]
    if failed.empty:
        out.append("No cell failed.")
    else:
        out += [f"- {r.model} · {r.detector} · {r.benchmark}: {r.error}" for r in failed.itertuples()]
    skipped = lb.problems(rows, "skipped")
    if len(skipped):
        out += ["", "Skipped (detector does not apply):", ""]
        out += [f"- {r.model} · {r.detector} · {r.benchmark}: {r.error}" for r in skipped.itertuples()]
    skipped_images = table.skipped_images() if table is not None else {}
    if skipped_images:
        out += ["", "Unreadable images (skipped; absent from every number above):", ""]
        out += [f"- {line}" for line in skipped_image_lines(skipped_images)]
    return "\n".join(out) + "\n"


def _markdown_table(df: pd.DataFrame, columns: Sequence[str]) -> str:
    columns = [c for c in columns if c in df.columns]
    lines = ["| " + " | ".join(_header(c) for c in columns) + " |",
             "|" + "|".join("---" if _is_text(df, c) else "---:" for c in columns) + "|"]
    for _, row in df.iterrows():
        lines.append("| " + " | ".join(
            str(row[c]).replace("|", "\\|") if _is_text(df, c) else _number(row[c], c)
            for c in columns) + " |")
    return "\n".join(lines)


# -- helpers --------------------------------------------------------------------------------
def _header(column: str) -> str:
    if column == "label":
        return "detector"
    if column == "vs_above":
        return "vs above (DeLong)"
    metric, _, suffix = column.partition(" ")
    return f"{lb.METRIC_LABELS.get(metric, metric)} {suffix}".strip() if suffix else \
        lb.METRIC_LABELS.get(column, column)


def _is_text(df: pd.DataFrame, column: str) -> bool:
    return not pd.api.types.is_numeric_dtype(df[column])


def _number(value: object, column: str) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA:
        return "–"
    if column in ("rank", "groups") or isinstance(value, (int, np.integer)):
        return str(int(value))  # type: ignore[call-overload]
    return f"{float(value):.4f}"  # type: ignore[arg-type]


def _close(value: object, target: float) -> bool:
    try:
        return bool(np.isclose(float(value), target, rtol=0, atol=1e-12))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def _e(value: object) -> str:
    return html.escape(str(value))


def _configuration(folder: Path) -> str:
    for name in ("experiment.toml", "experiment.json"):
        path = folder / name
        if path.exists():
            return path.read_text(encoding="utf-8")
    return ""


def _experiment_name(rows: pd.DataFrame) -> str:
    names = [n for n in dict.fromkeys(rows["experiment"].dropna().astype(str)) if n]
    return ", ".join(names)
