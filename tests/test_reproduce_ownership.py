"""`fleetcast reproduce` owns only what it wrote in DOCS_DIR/reproduce (docs/reliability.md,
"fleetcast reproduce"): a user's file beside the figures stays, a user's page or index is
refused before any run, a figure in the way of a user's file is refused before anything moves,
a Markdown file that is not UTF-8 is no page, a page written before pages listed their figures
is replaced with them, and a second command into the directory is refused. The papers here are
the real ones without runs or claims, drawing tiny files, so no config runs."""

import dataclasses
import json
import os
import shutil

import pytest

from pipelines import cli
from pipelines.io import root_files
from pipelines.io.manifests import STATE_DIR
from pipelines.reproduce import page, registry, runs
from pipelines.reproduce.paper import no_tables
from tests.helpers import REPO, snapshot


def without_runs(monkeypatch, key, *names):
    """Makes paper `key` one without runs or claims whose figures are files `names`."""
    def figures(_, directory):
        for name in names:
            (directory / name).write_bytes(f"drawn {name}".encode())
        return [(name, f"caption of {name}") for name in names]
    monkeypatch.setitem(registry.PAPERS, key, dataclasses.replace(
        registry.PAPERS[key], runs=(), claims=(), figures=figures, tables=no_tables))


def reproduce(docs, key) -> int:
    return cli.main(["reproduce", key, "--docs_dir", str(docs), "--output_dir",
                     str(docs.parent / "runs"), "-q"])


def refusal(path, pages) -> str:
    """What fleetcast prints when `path`, a file it did not write, is in its way in `pages`."""
    return (f"fleetcast: {path}: in the way, and not written by fleetcast reproduce (no page of "
            f"its in {pages} owns it); move it away or choose another --docs_dir\n")


def figures_listed(page_path) -> list:
    return page.read_marker(page_path)["figures"]


@pytest.fixture
def run_calls(monkeypatch):
    """The specs `Runs.run` is called with (it runs nothing)."""
    calls = []
    monkeypatch.setattr(runs.Runs, "run", lambda self, spec: calls.append(spec))
    return calls


def test_a_users_file_beside_the_figures_survives_every_reproduce(tmp_path, monkeypatch):
    pages = tmp_path / "docs" / "reproduce"
    (pages / "Ling25").mkdir(parents=True)
    (pages / "Ling25" / "mine.png").write_bytes(b"mine")
    without_runs(monkeypatch, "Ling25", "demo_summary.png")
    assert reproduce(tmp_path / "docs", "Ling25") == 0
    assert figures_listed(pages / "Ling25.md") == ["Ling25/demo_summary.png"]
    without_runs(monkeypatch, "Ling25", "demo_over_time.png")
    assert reproduce(tmp_path / "docs", "Ling25") == 0
    assert figures_listed(pages / "Ling25.md") == ["Ling25/demo_over_time.png"]
    assert {path.name: path.read_bytes() for path in (pages / "Ling25").iterdir()} == {
        "mine.png": b"mine", "demo_over_time.png": b"drawn demo_over_time.png"}
    assert [p.name for p in (pages / STATE_DIR).iterdir()] == [root_files.LOCK]


@pytest.mark.parametrize("name", ["index.md", "Bashir21.md"])
def test_a_users_page_or_index_is_refused_before_any_run(tmp_path, capsys, run_calls, name):
    pages = tmp_path / "docs" / "reproduce"
    pages.mkdir(parents=True)
    (pages / name).write_text("# my notes\n")
    assert reproduce(tmp_path / "docs", "Bashir21") == 2
    assert capsys.readouterr().err == refusal(pages / name, pages)
    assert run_calls == []
    assert sorted(p.name for p in pages.iterdir()) == [STATE_DIR, name]
    assert (pages / name).read_text() == "# my notes\n"


def test_a_markdown_file_that_is_not_utf8_is_no_page_and_stays(tmp_path, monkeypatch):
    pages = tmp_path / "docs" / "reproduce"
    pages.mkdir(parents=True)
    (pages / "notes.md").write_bytes(b"# caf\xe9 <!-- fleetcast-reproduce {} -->\n")
    without_runs(monkeypatch, "Bashir21", "fig10.png")
    assert reproduce(tmp_path / "docs", "Bashir21") == 0
    index = (pages / "index.md").read_text()
    assert "| [Bashir21](Bashir21.md) |" in index and "notes" not in index
    assert (pages / "notes.md").read_bytes() == b"# caf\xe9 <!-- fleetcast-reproduce {} -->\n"


def test_a_page_written_before_pages_listed_their_figures_is_replaced_with_them(
        tmp_path, monkeypatch):
    """The committed Pace18 page, its marker as pages wrote it before they listed their
    figures, owns the figures it links, not every file in Pace18/; the committed index.md is
    fleetcast's too."""
    pages = tmp_path / "docs" / "reproduce"
    shutil.copytree(REPO / "docs" / "reproduce" / "Pace18", pages / "Pace18")
    shutil.copy(REPO / "docs" / "reproduce" / "index.md", pages / "index.md")
    text = (REPO / "docs" / "reproduce" / "Pace18.md").read_text()
    found = page.read_marker(REPO / "docs" / "reproduce" / "Pace18.md")
    older = {name: value for name, value in found.items() if name != "figures"}
    (pages / "Pace18.md").write_text(text.replace(
        page.marker(page.MARKER, found), page.marker(page.MARKER, older)))
    assert page.read_marker(pages / "Pace18.md") == older
    assert len(page.owned(str(pages), "Pace18.md")) > 1
    (pages / "Pace18" / "mine.png").write_bytes(b"mine")
    without_runs(monkeypatch, "Pace18", "shaping_002_load.png", "new.png")
    assert reproduce(tmp_path / "docs", "Pace18") == 0
    assert figures_listed(pages / "Pace18.md") == ["Pace18/new.png",
                                                   "Pace18/shaping_002_load.png"]
    assert {path.name: path.read_bytes() for path in (pages / "Pace18").iterdir()} == {
        "mine.png": b"mine", "new.png": b"drawn new.png",
        "shaping_002_load.png": b"drawn shaping_002_load.png"}
    index = (pages / "index.md").read_text()
    assert f"<!-- {page.INDEX_MARKER} {{}} -->" in index
    assert "| [Pace18](Pace18.md) |" in index


def test_a_figure_in_the_way_of_a_users_file_is_refused_before_anything_moves(
        tmp_path, monkeypatch, capsys):
    pages = tmp_path / "docs" / "reproduce"
    (pages / "Ling25").mkdir(parents=True)
    (pages / "Ling25" / "demo_summary.png").write_bytes(b"mine")
    without_runs(monkeypatch, "Ling25", "a.png", "demo_summary.png")
    assert reproduce(tmp_path / "docs", "Ling25") == 2
    assert capsys.readouterr().err == refusal(pages / "Ling25" / "demo_summary.png", pages)
    assert list(snapshot(pages)) == ["Ling25/demo_summary.png"]
    assert (pages / "Ling25" / "demo_summary.png").read_bytes() == b"mine"
    assert [p.name for p in (pages / STATE_DIR).iterdir()] == [root_files.LOCK]


def test_a_reproduce_into_a_directory_another_command_holds_is_refused(
        tmp_path, capsys, run_calls):
    pages = tmp_path / "docs" / "reproduce"
    (pages / STATE_DIR).mkdir(parents=True)
    held = root_files.lock(str(pages), str(pages / STATE_DIR), "pid 1 on elsewhere, a test")
    try:
        assert reproduce(tmp_path / "docs", "Bashir21") == 2
    finally:
        os.close(held)
    assert capsys.readouterr().err == (
        f"fleetcast: {pages}: another fleetcast command is writing into this directory (pid 1 on "
        "elsewhere, a test); wait for it to end or write elsewhere (the lock goes when that "
        "process ends)\n")
    assert run_calls == [] and snapshot(pages) == {}


def test_a_damaged_marker_makes_no_page(tmp_path):
    pages = tmp_path / "reproduce"
    pages.mkdir()
    (pages / "A.md").write_text('# A\n\n<!-- fleetcast-reproduce {"key": "A", "counts": '
                                '{"reproduced": "two"}, "quick": true, "date": "d"} -->\n')
    (pages / "B.md").write_text("# B\n\n<!-- fleetcast-reproduce {not json} -->\n")
    marker = {"key": "C", "counts": {}, "quick": True, "date": "d",
              "figures": ["C/c.png", "C/../index.md", "D/d.png", "C/sub/c.png", 3]}
    (pages / "C.md").write_text(f"# C\n\n<!-- fleetcast-reproduce {json.dumps(marker)} -->\n")
    assert page.owned(str(pages), "A.md") == page.owned(str(pages), "B.md") == set()
    assert page.owned(str(pages), "C.md") == {"C.md", "C/c.png"}
    assert "[A]" not in page.write_index(str(tmp_path), {}).read_text()
