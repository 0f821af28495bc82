"""`fleetcast report RESULTS_DIR` as a user runs it, and the page rendered in a real headless
Chromium (Debian's chromium + chromium-driver, driven by selenium): every figure loads."""

import pathlib
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from pipelines import config as run_config
from pipelines.report import figures, lifetime, overcommit, placement, shaping, write_report
from tests.helpers import headless_chromium, needs_chromium

FLEETCAST = pathlib.Path(sys.executable).parent / "fleetcast"
SCREENSHOT = pathlib.Path("/tmp/fleetcast_report.png")
# Every stage on a tiny synthetic trace; the placement sweeps three noisy accuracies, the
# shaping two forecasters over 2 K1 × 2 K2 on 2 small hosts (so that applications queue).
CONFIG = """
name: "tiny"
synthetic { machines: 4 days: 1 seed: 1 }
overcommit {
  metric { cpu_percentile: 90 }
  scheduler { by_machine_id: true }
  fortune_teller { name: "oracle" oracle { horizon_s: 86400 cap_to_limit: true } }
  fortune_teller { name: "borg_default" predictor { borg_default { phi: 0.9 } } }
  fortune_teller { name: "n_sigma" predictor { n_sigma { n: 5 } } }
  fortune_teller { name: "max_n_sigma_rc_like" predictor { max_of {
    predictors { n_sigma { n: 5 } } predictors { rc_like { percentile: 99 } } } } }
}
lifetime_model { lifetime_cap_s: 10800 num_trees: 10 learning_rate: 0.2
                 long_lived_threshold_s: 3600 num_shards: 2 }
placement { policy: BEST_FIT policy: NILAS lifetime_source { oracle: true }
            lifetime_source { noisy_oracle_accuracy: 0.6 }
            lifetime_source { noisy_oracle_accuracy: 0.9 }
            warmup_s: 10800 sample_period_s: 900 }
shaping { policy: BASELINE policy: OPTIMISTIC policy: PESSIMISTIC
          forecaster: ORACLE forecaster: ARIMA k1: 0 k1: 0.25 k2: 0 k2: 1 seed: 0
          shaping_interval_steps: 12 host_shape { cpu: 0.5 memory: 0.5 } host_count: 2
          elastic_fraction: 0.5 }
output { num_shards: 1 }
"""
FIGURES = ("overcommit_fig10", "placement_empty_hosts", "placement_summary",
           "placement_accuracy_sweep", "lifetime_f1_vs_uptime", "lifetime_error_histogram",
           "lifetime_model_comparison", "lifetime_aging", "shaping_fig2", "shaping_fig3")


def fleetcast(*args, cwd):
    return subprocess.run([str(FLEETCAST), *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """(results dir, `fleetcast report` result) of a tiny run of every stage."""
    root = tmp_path_factory.mktemp("report")
    (root / "tiny.textproto").write_text(CONFIG)
    run = fleetcast("run", "tiny.textproto", "--output_dir", "results/tiny", "-q", cwd=root)
    assert run.returncode == 0, run.stderr[-3000:]
    return root / "results" / "tiny", fleetcast("report", "results/tiny", cwd=root)


@pytest.mark.slow
def test_report_writes_one_page_and_every_figure_as_png_and_svg(report):
    results, done = report
    assert done.returncode == 0, done.stderr[-3000:]
    page = results / "report" / "report.html"
    assert f"report: {page}" in done.stdout
    text = page.read_text(encoding="utf-8")
    for figure in FIGURES:
        assert (results / "report" / "figures" / f"{figure}.png").stat().st_size > 5000
        assert (results / "report" / "figures" / f"{figure}.svg").read_text().startswith(
            "<?xml")
        assert f'<figure id="{figure}"><img' in text
    # Self-contained: images are data URIs, nothing is fetched.
    assert text.count('src="data:image/png;base64,') == len(FIGURES)
    assert "http://" not in text and "https://" not in text
    for section in ('<section id="findings">', "<summary>Config</summary>", "synthetic {",
                    "Rows per source table", "Dead letters (malformed rows): 0",
                    "Left out by design (exclusions, not errors)",
                    '<h2 id="overcommit">Overcommit</h2>', '<h2 id="placement">Placement</h2>',
                    '<h2 id="lifetime">Lifetime models</h2>', "la_classifier",
                    '<h2 id="shaping">Resource shaping</h2>', "Runs: means over seeds"):
        assert section in text, section
    # num_trees (int64 with nulls) prints as whole numbers, a missing one as "—".
    trained = text[text.index("<h3>Trained models</h3>"):]
    trained = trained[:trained.index("</table>")]
    assert "NaN" not in trained and not re.search(r"<td>\d+\.0</td>", trained), trained
    assert re.search(r"<td>\d+</td>\s*</tr>", trained) and "<td>—</td>" in trained, trained
    # The findings come first, the run's details last.
    assert text.index('id="findings"') < text.index('<h2 id="overcommit">') < text.index(
        "<summary>Config</summary>")


def overlapping_tick_labels(fig, renderer) -> list:
    """(axes title, label, label) of each pair of tick labels of one axis that overlap."""
    found = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = [t for t in axis.get_ticklabels() if t.get_visible() and t.get_text()]
            boxes = [t.get_window_extent(renderer).expanded(0.98, 0.98) for t in labels]
            for i in range(len(boxes)):
                for j in range(i + 1, len(boxes)):
                    if boxes[i].overlaps(boxes[j]):
                        found.append((ax.get_title(), labels[i].get_text(),
                                      labels[j].get_text()))
    return found


@pytest.mark.slow
def test_no_figure_draws_a_legend_over_an_axes_or_overlapping_tick_labels(report, tmp_path,
                                                                         monkeypatch):
    results, _ = report
    checked = []

    def check_then_save(writer, fig, name, caption):
        renderer = fig.canvas.get_renderer()
        legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
        for legend in legends:
            box = legend.get_window_extent(renderer)
            for ax in fig.axes:
                assert not box.overlaps(ax.get_window_extent(renderer)), (name, ax.get_title())
        assert overlapping_tick_labels(fig, renderer) == [], name
        checked.append(name)
        return save(writer, fig, name, caption)

    save = figures.FigureWriter.html
    monkeypatch.setattr(figures.FigureWriter, "html", check_then_save)
    write_report(str(results), str(tmp_path / "report"))
    assert sorted(checked) == sorted(FIGURES)


def test_findings_tables_on_hand_made_summaries():
    summary = pd.DataFrame({
        "pool": "p", "defrag": "none", "num_hosts": 10,
        "policy": ["best_fit", "nilas", "best_fit", "nilas"],
        "lifetime_source": ["oracle", "oracle", "one_shot_model", "one_shot_model"],
        "empty_hosts_pct": [20.0, 21.234, 20.0, 5.5],
        "upper_bound_empty_hosts_pct": 50.0,
        "empty_hosts_pct_vs_best_fit_pp": [0.0, 1.234, 0.0, -14.5],
        "failed_placements": [0, 0, 0, 12]})
    assert placement.gains_table(summary, "p").values.tolist() == [
        ["nilas", "-14.50 (12 failed)", "+1.23"]]
    block = placement.findings({"placement_summary": summary}, None)
    assert "Best-Fit keeps 20.00 % empty; upper bound 50.00 %" in block
    assert "Oracle lifetimes (perfect predictions): most nilas, +1.23 pp." in block
    assert "Learned lifetimes: most nilas with one_shot_model, -14.50 pp, 12 failed " \
           "placements." in block


def test_the_model_comparison_keeps_many_long_model_names_apart():
    names = [f"la_classifier@customer_large_user_only_{i}" for i in range(8)]
    table = pd.DataFrame({metric: np.linspace(0.5, 0.9, 8) for metric, _ in lifetime.COMPARED},
                         index=names)
    fig = lifetime.model_comparison(table)
    fig.canvas.draw()
    assert overlapping_tick_labels(fig, fig.canvas.get_renderer()) == []
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == names


def test_report_of_a_directory_without_a_run_fails_naming_it(tmp_path):
    done = fleetcast("report", "nothing_here", cwd=tmp_path)
    assert done.returncode == 2
    assert "nothing_here" in done.stderr


def test_teller_labels_say_what_each_teller_computes():
    config = run_config.parse_config(CONFIG)
    assert overcommit.teller_labels(config) == {
        "oracle": "oracle: peak oracle 24 h p100",
        "borg_default": "borg_default: borg-default φ=0.9",
        "n_sigma": "n_sigma: N-sigma n=5",
        "max_n_sigma_rc_like": "max_n_sigma_rc_like: max(N-sigma n=5, RC-like p99)",
    }


@pytest.mark.browser
@pytest.mark.slow
@needs_chromium
def test_every_figure_loads_in_headless_chromium(report):
    results, done = report
    assert done.returncode == 0, done.stderr[-3000:]
    with headless_chromium() as driver:
        driver.get((results / "report" / "report.html").as_uri())
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.closest('figure').id, i.complete,"
            " i.naturalWidth, i.naturalHeight]);")
        assert sorted(image[0] for image in images) == sorted(FIGURES)
        for figure, complete, width, height in images:
            assert complete and width > 500 and height > 200, (figure, width, height)
        # The first screen of a laptop holds every stage's findings; nothing is wider than
        # the page (wide tables scroll inside their own box).
        driver.set_window_size(1400, 900)
        screen = driver.execute_script("return window.innerHeight;")
        bottoms = driver.execute_script(
            "return Array.from(document.querySelectorAll('#findings .finding')).map("
            "e => [e.querySelector('h3').textContent, e.getBoundingClientRect().bottom]);")
        assert [title for title, _ in bottoms] == [
            "Overcommit", "Lifetime models", "Placement", "Resource shaping"]
        assert all(bottom <= screen for _, bottom in bottoms), (bottoms, screen)
        overflowing = driver.execute_script(
            "const width = document.documentElement.clientWidth;"
            "return Array.from(document.body.querySelectorAll('*')).filter(e => "
            "!e.closest('.table, pre, details:not([open]) > :not(summary)') "
            "&& e.getBoundingClientRect().right > width + 1).map(e => e.tagName);")
        assert overflowing == []
        assert driver.execute_script("return document.documentElement.scrollWidth <= "
                                     "document.documentElement.clientWidth;")
        # Nor is any table wider than its box (outside the folded run details).
        wide = driver.execute_script(
            "return Array.from(document.querySelectorAll('.table')).filter(e => "
            "!e.closest('details') && e.scrollWidth > e.clientWidth + 1).map(e => "
            "e.textContent.slice(0, 80));")
        assert wide == []
        height = driver.execute_script("return document.body.scrollHeight;")
        driver.set_window_size(1300, min(height + 100, 16000))
        driver.save_screenshot(str(SCREENSHOT))
    assert SCREENSHOT.stat().st_size > 50_000


def test_demo_placement_sweeps_at_least_four_accuracies():
    config = run_config.load_config(str(pathlib.Path(__file__).parent.parent / "configs"
                                        / "demo.textproto"))
    accuracies = {1.0 if s.WhichOneof("source") == "oracle" else s.noisy_oracle_accuracy
                  for s in config.placement.lifetime_source
                  if s.WhichOneof("source") in ("oracle", "noisy_oracle_accuracy")}
    assert len(accuracies) >= 4, accuracies


def test_shaping_summary_keeps_the_baseline_and_each_policys_smallest_and_best_cell():
    runs = pd.DataFrame({
        "forecaster": ["none", "none", "oracle", "oracle", "oracle", "oracle"],
        "policy": ["baseline", "baseline"] + ["pessimistic"] * 4,
        "k1": [np.nan, np.nan, 0.0, 0.0, 0.5, 0.5], "k2": [np.nan, np.nan, 0.0, 0.0, 0.0, 0.0],
        "seed": [0, 1, 0, 1, 0, 1],
        "turnaround_speedup_vs_baseline": [1.0, 1.0, 2.0, 4.0, 4.0, 6.0],
        "failed_applications_pct": [0.0, 0.0, 10.0, 20.0, 0.0, 0.0]})
    for column in set(shaping.SUMMARY_COLUMNS) - set(runs):
        runs[column] = 1.0
    table = shaping.summary_table(runs)
    assert list(table["cell"]) == ["baseline", "smallest K1, K2", "best ratio"]
    assert np.isnan(table["k1"][0]) and list(table["k1"][1:]) == [0.0, 0.5]
    assert list(table["turnaround_speedup_vs_baseline"]) == [1.0, 3.0, 5.0]
    assert list(table["failed_applications_pct"]) == [0.0, 15.0, 0.0]


def test_shaping_speedup_against_the_offered_load_draws_means_per_load():
    """Two target loads x two seeds: the oracle's pessimistic line is the mean speed-up of
    its smallest cell at each load's mean offered load; Fig. 2 and 3 show the load where
    that speed-up peaks."""
    rows = []
    for load, offered, queue, speedups in ((0.5, (0.49, 0.51), 0.0, (1.0, 1.0)),
                                          (1.1, (1.0, 1.2), 40.0, (30.0, 50.0))):
        for seed in (0, 1):
            rows.append(("none", "baseline", np.nan, np.nan, seed, load, offered[seed], queue,
                         1.0))
            rows.append(("oracle", "pessimistic", 0.0, 0.0, seed, load, offered[seed], 0.0,
                         speedups[seed]))
            rows.append(("oracle", "pessimistic", 0.5, 0.0, seed, load, offered[seed], 0.0,
                         2.0))
    runs = pd.DataFrame(rows, columns=["forecaster", "policy", "k1", "k2", "seed",
                                       "target_offered_load", "offered_load",
                                       "mean_queue_length", "turnaround_speedup_vs_baseline"])
    assert shaping.figure_load(runs) == 1.1
    left, right = shaping.fig_load(runs).axes
    (line,) = [line for line in left.get_lines() if line.get_label().startswith("oracle")]
    np.testing.assert_allclose(line.get_xdata(), [0.5, 1.1])
    np.testing.assert_allclose(line.get_ydata(), [1.0, 40.0])
    np.testing.assert_allclose(right.get_lines()[0].get_ydata(), [0.0, 40.0])
    assert shaping.fig_load(runs[runs["target_offered_load"] == 0.5]) is None
    assert shaping.figure_load(runs[runs["target_offered_load"] == 0.5]) is None


def test_accuracy_sweep_draws_each_accuracys_mean_over_seeds_with_their_range():
    rows = [("nilas", "oracle", np.nan, np.nan, 3.0)]
    for seed, gains in ((0, (1.0, 2.0)), (1, (0.5, 1.0)), (2, (0.0, 1.5))):
        for accuracy, gain in zip((0.6, 0.9), gains):
            rows.append(("nilas", f"noisy_oracle_{accuracy:g}_seed{seed}", accuracy, seed,
                         gain))
    summary = pd.DataFrame(rows, columns=["policy", "lifetime_source", "noisy_oracle_accuracy",
                                          "noisy_oracle_seed",
                                          "empty_hosts_pct_vs_best_fit_pp"])
    summary["pool"], summary["defrag"] = "p", "none"
    ax = placement.accuracy_sweep(summary, "p").axes[0]
    (line,) = ax.get_lines()[:1]
    np.testing.assert_allclose(line.get_xdata(), [0.6, 0.9, 1.0])
    np.testing.assert_allclose(line.get_ydata(), [0.5, 1.5, 3.0])
    # One error bar per accuracy, from the least to the largest gain of its seeds.
    (bars,) = [c for c in ax.collections if len(c.get_segments()) == 3]
    np.testing.assert_allclose([segment[:, 1] for segment in bars.get_segments()],
                               [[0.0, 1.0], [1.0, 2.0], [3.0, 3.0]])
    assert "mean and range over 3 seeds" in ax.get_title()
