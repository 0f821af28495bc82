"""The report page's HTML parts: its stylesheet, tables that scroll inside their own box,
stage findings and folded blocks."""

import html
import pathlib

import pandas as pd

STYLESHEET = (pathlib.Path(__file__).with_name("report.css")).read_text(encoding="utf-8")


def table(frame: pd.DataFrame, index: bool = False, **kwargs) -> str:
    """`frame` as an HTML table inside a box that scrolls sideways when the table is wider
    than the page (the page itself never does); a missing value shows as "—"."""
    kwargs.setdefault("na_rep", "—")
    return f'<div class="table">{frame.to_html(index=index, border=0, **kwargs)}</div>'


def finding(anchor: str, title: str, sentences, summary=None, index: bool = False) -> str:
    """One stage's block of the findings: a title linking to its section, a few sentences
    (escaped here), and optional small tables (`summary`: a DataFrame, a table's HTML, or a
    list of them; empty ones are left out)."""
    text = "".join(f"<p>{html.escape(s)}</p>" for s in sentences)
    parts = summary if isinstance(summary, (list, tuple)) else [summary]
    shown = "".join(part if isinstance(part, str) else table(part, index=index)
                    for part in parts if part is not None and len(part))
    return (f'<div class="finding"><h3><a href="#{anchor}">{html.escape(title)}</a></h3>'
            f"{text}{shown}</div>")


def folded(title: str, body: str) -> str:
    """`body` under a <details> closed by default, titled `title` (escaped)."""
    return f"<details><summary>{html.escape(title)}</summary>\n{body}\n</details>"


def signed(value: float, digits: int = 2) -> str:
    """"+1.23" / "-0.40" / "+0.00": a difference as text with its sign."""
    return f"{value:+.{digits}f}"
