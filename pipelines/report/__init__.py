"""`fleetcast report RESULTS_DIR`: one self-contained HTML page summarising a run.

    report.html      the config, rows per table, rows per source table, dead letters, and
                     for each stage present its paper-style figures (embedded as PNG) and
                     tables
    figures/*.png    every figure, also as figures/*.svg

One module per stage's figures, named by the stage registry (pipelines/stages/registry.py):
overcommit.py, lifetime.py, placement.py, shaping.py; figures.py saves and embeds them. The
report reads a local results directory as `fleetcast query` does: the files its run manifest
lists (pipelines/io/manifests.py), and the config the manifest records.
"""

import datetime
import html
import importlib
import pathlib
from typing import Optional

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines import config as run_config
from pipelines.io import manifests
from pipelines.query import QueryError, table_files
from pipelines.report.figures import FigureWriter
from pipelines.stages.registry import STAGES

STYLE = """
body { font-family: sans-serif; max-width: 1250px; margin: 1em auto; color: #222; }
h1 { border-bottom: 2px solid #444; } h2 { border-bottom: 1px solid #aaa; margin-top: 2em; }
table { border-collapse: collapse; font-size: 12px; margin: 0.5em 0; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
pre { background: #f4f4f4; padding: 0.6em; font-size: 12px; overflow-x: auto; }
figure { margin: 1em 0; } figure img { max-width: 100%; }
figcaption { font-size: 13px; color: #444; } .files { color: #888; }
"""


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


def _run_section(results_dir: pathlib.Path, config, tables: dict) -> str:
    parts = [f"<p>Results directory: <code>{html.escape(str(results_dir))}</code></p>",
             f"<h2>Config</h2><pre>{html.escape(str(config))}</pre>"]
    rows = pd.DataFrame({"table": list(tables), "rows": [len(t) for t in tables.values()]})
    parts += ["<h2>Counts</h2><h3>Rows per table</h3>", rows.to_html(index=False)]
    counts = tables.get("source_counts")
    if counts is not None and len(counts):
        parts += ["<h3>Rows per source table</h3>",
                  counts.sort_values(["source", "table"]).to_html(index=False)]
    dead = tables.get("dead_letters", pd.DataFrame(columns=["source", "table", "reason"]))
    parts.append(f"<h2>Dead letters: {len(dead):,}</h2>")
    if len(dead):
        reasons = (dead.groupby(["source", "table", "reason"]).size()
                   .rename("rows").sort_values(ascending=False).reset_index())
        parts.append(reasons.head(30).to_html(index=False))
    return "\n".join(parts)


def write_report(results_dir: str, out_dir: Optional[str] = None) -> pathlib.Path:
    """Writes report.html and figures/ under `out_dir` (default RESULTS_DIR/report); returns
    the page's path."""
    results = pathlib.Path(results_dir).resolve()
    out = pathlib.Path(out_dir) if out_dir else results / "report"
    tables = read_tables(results)
    config = read_config(results)
    figures = FigureWriter(out / "figures")
    name = config.name or results.name
    body = [f"<h1>fleetcast run {html.escape(name)}</h1>",
            _run_section(results, config, tables)]
    body += [importlib.import_module(stage.report).section(tables, config, figures)
             for _, stage in STAGES.items() if stage.report]
    created = datetime.datetime.now().isoformat(timespec="seconds")
    page = out / "report.html"
    page.write_text(
        f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>fleetcast "
        f"{html.escape(name)}</title><style>{STYLE}</style></head><body>\n"
        + "\n".join(part for part in body if part)
        + f"\n<p class=\"files\">Written {created} by fleetcast report.</p></body></html>\n",
        encoding="utf-8")
    return page
