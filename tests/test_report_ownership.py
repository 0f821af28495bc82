"""`fleetcast report --out DIR` owns only what it wrote in DIR (docs/reliability.md,
"fleetcast report"): a report.html or figure of the user's is refused before anything moves,
a second report replaces the first's files and deletes those it no longer draws, a report
written before reports listed their figures is replaced with them, and a second command into
DIR is refused."""

import os
import re

import pytest

from pipelines import cli
from pipelines.io import owned_files, root_files
from pipelines.io.manifests import STATE_DIR
from tests.helpers import OVERCOMMIT, run_cli, snapshot, tiny_config

FIGURES = ["figures/overcommit_fig10.png", "figures/overcommit_fig10.svg"]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """The results directory of a tiny overcommit run (one figure in its report)."""
    root = tmp_path_factory.mktemp("results")
    assert run_cli(tiny_config(root, extra=OVERCOMMIT), root / "tiny") == 0
    return root / "tiny"


def report(results, out) -> int:
    return cli.main(["report", str(results), "--out", str(out)])


def listed(out) -> list:
    """The figures the fleetcast-report marker of DIR/report.html lists."""
    text = (out / "report.html").read_text(encoding="utf-8")
    return owned_files.find_marker(text, "fleetcast-report")["figures"]


def refusal(path, out) -> str:
    return (f"fleetcast: {path}: in the way, and not written by fleetcast report (no page of "
            f"its in {out} owns it); move it away or choose another --out\n")


def test_a_users_report_html_is_refused_and_stays(results, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.html").write_text("<html>my report</html>\n")
    assert report(results, out) == 2
    assert capsys.readouterr().err == refusal(out / "report.html", out)
    assert (out / "report.html").read_text() == "<html>my report</html>\n"
    assert sorted(os.listdir(out)) == [STATE_DIR, "report.html"]


def test_a_figure_in_the_way_of_a_users_file_is_refused_before_anything_moves(
        results, tmp_path, capsys):
    out = tmp_path / "out"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "overcommit_fig10.svg").write_text("mine")
    assert report(results, out) == 2
    assert capsys.readouterr().err == refusal(out / "figures" / "overcommit_fig10.svg", out)
    assert list(snapshot(out)) == ["figures/overcommit_fig10.svg"]
    assert (out / "figures" / "overcommit_fig10.svg").read_text() == "mine"
    assert [p.name for p in (out / STATE_DIR).iterdir()] == [root_files.LOCK]


def test_a_second_report_replaces_the_first_and_deletes_what_it_no_longer_draws(
        results, tmp_path):
    out = tmp_path / "out"
    assert report(results, out) == 0
    assert listed(out) == FIGURES
    # The first report as if it had drawn one more figure; a user's files beside it.
    for name in ("figures/gone.png", "figures/gone.svg"):
        (out / name).write_text("an earlier figure")
    page = (out / "report.html").read_text(encoding="utf-8")
    (out / "report.html").write_text(page.replace(
        '"figures": [', '"figures": ["figures/gone.png", "figures/gone.svg", ', 1))
    (out / "figures" / "mine.png").write_text("mine")
    (out / "notes.txt").write_text("mine")
    first = snapshot(out)
    assert report(results, out) == 0
    assert listed(out) == FIGURES
    after = snapshot(out)
    assert set(after) == {"report.html", "notes.txt", "figures/mine.png", *FIGURES}
    assert after["report.html"] != first["report.html"]
    assert [p.name for p in (out / STATE_DIR).iterdir()] == [root_files.LOCK]


def test_a_report_written_before_reports_listed_their_figures_is_replaced(results, tmp_path):
    """A report.html as fleetcast report wrote it before the marker: its <figure> elements
    name its figures; another file in figures/ is not its own."""
    out = tmp_path / "out"
    (out / "figures").mkdir(parents=True)
    figures = "".join(f'<figure id="{name}"><img alt="a" src="data:image/png;base64,AA=="> '
                      f"</figure>\n" for name in ("overcommit_fig10", "gone"))
    (out / "report.html").write_text(
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>fleetcast tiny</title>'
        f"</head><body>\n<h1>fleetcast run tiny</h1>\n{figures}<p class=\"files\">Written "
        "2026-11-01T10:00:00 by fleetcast report.</p></body></html>\n")
    for name in ("overcommit_fig10.png", "overcommit_fig10.svg", "gone.png", "gone.svg",
                 "mine.png"):
        (out / "figures" / name).write_text("an earlier figure")
    assert report(results, out) == 0
    assert set(snapshot(out)) == {"report.html", "figures/mine.png", *FIGURES}
    assert (out / "figures" / "overcommit_fig10.svg").read_text().startswith("<?xml")
    assert re.search(r"<!-- fleetcast-report \{.*\} -->",
                     (out / "report.html").read_text(encoding="utf-8"))


def test_a_report_into_a_directory_another_command_holds_is_refused(results, tmp_path, capsys):
    out = tmp_path / "out"
    (out / STATE_DIR).mkdir(parents=True)
    held = root_files.lock(str(out), str(out / STATE_DIR), "pid 1 on elsewhere, a test")
    try:
        assert report(results, out) == 2
    finally:
        os.close(held)
    assert capsys.readouterr().err == (
        f"fleetcast: {out}: another fleetcast command is writing into this directory (pid 1 on "
        "elsewhere, a test); wait for it to end or write elsewhere (the lock goes when that "
        "process ends)\n")
    assert snapshot(out) == {}
