"""`fleetcast report RESULTS_DIR`: one self-contained HTML page summarising a run.

    report.html      the findings of each stage that ran (and the config's warnings), then
                     each stage's paper-style figures (embedded as PNG) and tables, then
                     the config, row counts, dead letters and exclusions, folded
    figures/*.png    every figure, also as figures/*.svg

One module per stage, named by the stage registry (pipelines/stages/registry.py):
overcommit.py, lifetime.py, placement.py, shaping.py, each with `findings` and `section`;
figures.py saves and embeds the figures, page.py holds the page's parts and report.css its
one stylesheet. The report reads a local results directory as `fleetcast query` does: the
files its run manifest lists (pipelines/io/manifests.py), and the config the manifest
records. It replaces only a report and figures it wrote (its page's marker lists them) and
publishes them whole (pipelines/io/owned_files.py).
"""

import datetime
import html
import importlib
import pathlib
import re
from typing import Optional

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines import config as run_config
from pipelines.io import manifests, owned_files
from pipelines.query import QueryError, table_files
from pipelines.report import page as report_page
from pipelines.report.figures import FigureWriter
from pipelines.stages.registry import STAGES


def read_tables(results_dir: pathlib.Path) -> dict:
    """{table name: DataFrame} of every table of the run in a local results directory (the
    files its manifest lists; QueryError without a successful manifest)."""
    tables = {}
    for name, files in table_files(str(results_dir)).items():
        try:
            tables[name] = pa.concat_tables([pq.read_table(f) for f in files]).to_pandas()
        except (pa.ArrowException, OSError) as e:
            raise QueryError(f"table {name} of {results_dir}: {type(e).__name__}: {e}") \
                from None
    return tables


def read_config(results_dir: pathlib.Path):
    """The RunConfig the run's manifest records."""
    return run_config.parse_config(manifests.require(str(results_dir))["config"])


def _run_details(results_dir: pathlib.Path, config, tables: dict) -> str:
    """The run's config, rows per table and per source table, dead letters and exclusions,
    folded at the end of the page."""
    rows = pd.DataFrame({"table": list(tables), "rows": [len(t) for t in tables.values()]})
    parts = [f"<p>Results directory: <code>{html.escape(str(results_dir))}</code></p>",
             report_page.folded("Config", f"<pre>{html.escape(str(config))}</pre>"),
             report_page.folded("Rows per table", report_page.table(rows))]
    counts = tables.get("source_counts")
    if counts is not None and len(counts):
        parts.append(report_page.folded("Rows per source table", report_page.table(
            counts.sort_values(["source", "table"]))))
    dead = tables.get("dead_letters", pd.DataFrame(columns=["source", "table", "reason"]))
    reasons = (dead.groupby(["source", "table", "reason"]).size().rename("rows")
               .sort_values(ascending=False).reset_index())
    parts.append(report_page.folded(f"Dead letters (malformed rows): {len(dead):,}",
                                    report_page.table(reasons.head(30))))
    excluded = tables.get("exclusions")
    if excluded is not None and len(excluded):
        parts.append(report_page.folded(
            f"Left out by design (exclusions, not errors): {excluded['rows'].sum():,}",
            report_page.table(excluded.sort_values("rows", ascending=False))))
    return '<h2 id="run">The run</h2>\n' + "\n".join(parts)


def _findings(modules, tables: dict, config) -> str:
    """The page's first section: the config's warnings, then one block per stage that ran."""
    warnings = run_config.warnings(config)
    warned = ('<div class="warnings">' + "".join(
        f"<p>Warning: {html.escape(line)}</p>" for line in warnings) + "</div>"
              if warnings else "")
    blocks = [module.findings(tables, config) for module in modules]
    return (f'<section id="findings">{warned}<div class="findings">'
            + "".join(block for block in blocks if block) + "</div></section>")


def _owned_by_report(out: pathlib.Path) -> set:
    """The files, relative to `out`, that the report.html there owns, itself included: the
    figures its fleetcast-report marker lists, or, for a report written before the marker
    (its last line "... by fleetcast report.</p></body></html>"), the figures/NAME.png and
    .svg of its <figure id="NAME"> elements. Nothing for a file fleetcast report did not
    write, or no file."""
    text = owned_files.read_text(out / "report.html") or ""
    found = owned_files.find_marker(text, "fleetcast-report")
    if found is not None:
        listed = found.get("figures")
    elif text.startswith("<!DOCTYPE html>") and text.rstrip().endswith(
            "by fleetcast report.</p></body></html>"):
        names = re.findall(r'<figure id="([^"]+)">', text)
        listed = [f"figures/{name}.{kind}" for name in names for kind in ("png", "svg")]
    else:
        return set()
    return {"report.html", *owned_files.owned_paths(listed, "figures")}


def _page_body(results: pathlib.Path, config, tables: dict, figures: FigureWriter) -> str:
    """The page's body: title, links to the sections, the findings, each stage's section
    (its figures saved by `figures`), the run's details."""
    modules = [importlib.import_module(stage.report) for _, stage in STAGES.items()
               if stage.report]
    sections = [module.section(tables, config, figures) for module in modules]
    anchors = re.findall(r'<h2 id="([^"]+)">([^<]+)</h2>', "".join(sections))
    nav = " ".join(f'<a href="#{anchor}">{title}</a>' for anchor, title in anchors)
    created = datetime.datetime.now().isoformat(timespec="seconds")
    body = [f"<h1>fleetcast run {html.escape(config.name or results.name)}</h1>",
            f'<p class="subtitle">{html.escape(str(results))} · written {created} by '
            f"fleetcast report</p>",
            f'<nav>{nav} <a href="#run">The run</a></nav>',
            _findings(modules, tables, config), *sections,
            _run_details(results, config, tables)]
    return "\n".join(part for part in body if part)


def write_report(results_dir: str, out_dir: Optional[str] = None) -> pathlib.Path:
    """Writes report.html and figures/ under `out_dir` (default RESULTS_DIR/report); returns
    the page's path. The page opens with the findings of every stage that ran; the figures
    and tables follow per stage, and the run's details close it, folded. It holds the
    directory's lock, draws into its .fleetcast/report, and replaces or deletes only the
    files the report.html there owns (`_owned_by_report`): owned_files.Refused when another
    command holds the lock or another file is in the way, before anything moves."""
    results = pathlib.Path(results_dir).resolve()
    out = pathlib.Path(out_dir) if out_dir else results / "report"
    tables = read_tables(results)
    config = read_config(results)
    target = owned_files.OwnedDirectory(str(out), "fleetcast report", "--out")
    with target.locked(), target.staging("report") as staged:
        owned = _owned_by_report(out)
        target.refuse_foreign(["report.html"], owned)  # before any figure is drawn
        figures = FigureWriter(pathlib.Path(staged) / "figures")
        body = _page_body(results, config, tables, figures)
        marker = owned_files.marker("fleetcast-report",
                                    {"figures": owned_files.staged_files(staged)})
        name = html.escape(config.name or results.name)
        target.publish(staged, "report.html", (
            f"<!DOCTYPE html>\n<html lang=\"en\"><head>\n{marker}\n<meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>fleetcast {name}</title>"
            f"<style>{report_page.STYLESHEET}</style></head><body>\n{body}\n</body></html>\n"),
            owned)
    return out / "report.html"
