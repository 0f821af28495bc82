"""Progress of a run: `fleetcast run` as a user runs it prints stage progress (default), only
warnings (-q) or Beam's INFO lines too (-v), and the final Beam counters; long steps report at
least every REPORT_INTERVAL_S."""

import logging
import pathlib
import re
import subprocess
import sys
import time

import pytest

from pipelines import progress
from tests.helpers import counters_printed

FLEETCAST = pathlib.Path(sys.executable).parent / "fleetcast"
# Every stage on a tiny synthetic trace (a few seconds on the DirectRunner).
SMALL_ALL_STAGES = """
name: "small"
synthetic { machines: 4 days: 1 seed: 1 }
overcommit {
  metric { cpu_percentile: 90 }
  scheduler { by_machine_id: true }
  fortune_teller { name: "oracle" oracle { horizon_s: 86400 cap_to_limit: true } }
  fortune_teller { name: "borg_default" predictor { borg_default { phi: 0.9 } } }
}
lifetime_model { lifetime_cap_s: 10800 num_trees: 10 learning_rate: 0.2
                 long_lived_threshold_s: 3600 num_shards: 2 }
placement { policy: BEST_FIT policy: NILAS lifetime_source { oracle: true }
            warmup_s: 10800 sample_period_s: 900 }
output { num_shards: 1 }
"""
STAGE_LINES = (
    r"INFO reading google_v3: ",
    r"INFO overcommit: machine \d+ scored by 2 fortune tellers",
    r"INFO lifetime: training model uptime \(1 of \d, \d+ instances\): started",
    r"INFO lifetime: training model la_classifier \(\d of \d, \d+ instances\): done in ",
    r"INFO placement replay nilas / oracle / none on pool cell: started",
    r"INFO placement replay nilas / oracle / none on pool cell: done in ",
)


def fleetcast_run(tmp_path, *args):
    (tmp_path / "small.textproto").write_text(SMALL_ALL_STAGES)
    return subprocess.run([str(FLEETCAST), "run", "small.textproto", "--output_dir", "out",
                           *args], cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    return fleetcast_run(tmp_path_factory.mktemp("default"))


@pytest.mark.slow
def test_default_run_prints_stage_progress_and_the_final_counters(default_run):
    assert default_run.returncode == 0, default_run.stderr[-3000:]
    for line in STAGE_LINES:
        assert re.search(line, default_run.stderr), line
    assert "apache_beam" not in default_run.stderr  # Beam's own INFO lines stay hidden
    counters = counters_printed(default_run.stdout)
    # The counters agree with the tables the run wrote and the per-source counts it printed.
    usage_read = re.search(r"google_v3\.instance_usage\s+([\d,]+)", default_run.stdout)[1]
    assert counters["google_v3.instance_usage.rows_read"] == int(usage_read.replace(",", ""))
    assert counters["google_v3.instance_usage.rows_rejected"] == 0
    assert counters["overcommit.machines_scored"] == 4
    models = re.search(r"lifetime_models\s+([\d,]+) rows", default_run.stdout)[1]
    assert counters["lifetime.models_trained"] == int(models)
    assert counters["placement.replays_done"] == 2
    summary_rows = re.search(r"placement_summary\s+([\d,]+) rows", default_run.stdout)[1]
    assert counters["placement_summary.rows_written"] == int(summary_rows)


@pytest.mark.slow
def test_quiet_run_prints_no_progress_but_the_results(tmp_path):
    quiet = fleetcast_run(tmp_path, "-q")
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert " INFO " not in quiet.stderr
    assert "Results: out" in quiet.stdout and "placement.replays_done" in quiet.stdout


@pytest.mark.slow
def test_multi_process_workers_progress_shows_as_plain_lines(tmp_path):
    run = fleetcast_run(tmp_path, "--direct_running_mode=multi_processing",
                        "--direct_num_workers=2")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "INFO worker: placement replay nilas / oracle / none on pool cell: done in " in (
        run.stderr)
    assert "INFO Worker: severity" not in run.stderr  # Beam's raw forwarded entries


def test_verbose_and_quiet_exclude_each_other(tmp_path):
    run = fleetcast_run(tmp_path, "-v", "-q")
    assert run.returncode == 2
    assert "not allowed with argument" in run.stderr


# A long step: the heartbeat, from inside, every interval.

def test_heartbeat_reports_every_interval_while_a_step_runs(caplog):
    state = {"done": 0}
    with caplog.at_level(logging.INFO, logger="fleetcast.progress"):
        with progress.Heartbeat("training", lambda: f"{state['done']} trees",
                                interval_s=0.05):
            for _ in range(5):
                time.sleep(0.05)
                state["done"] += 1
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "training: started"
    beats = [line for line in lines if "trees (" in line and "s so far)" in line]
    assert len(beats) >= 3, lines
    assert re.fullmatch(r"training: done in 0\.\d s", lines[-1])


def test_heartbeat_says_when_the_step_failed(caplog):
    with caplog.at_level(logging.INFO, logger="fleetcast.progress"):
        with pytest.raises(ValueError):
            with progress.Heartbeat("replay", interval_s=10):
                raise ValueError("boom")
    assert caplog.records[-1].getMessage().startswith("replay: failed in ")


def test_throttle_allows_one_line_per_interval():
    throttle = progress.Throttle(interval_s=0.2)
    assert throttle.ready() and not throttle.ready()
    time.sleep(0.25)
    assert throttle.ready()


def test_worker_filter_keeps_progress_lines_and_warnings_only():
    def record(level, entry):
        return logging.LogRecord(progress.WORKER_LOGGER, level, __file__, 1, "Worker: %s",
                                 (entry,), None)

    keep = progress.WorkerProgressLines()
    line = record(logging.INFO, 'severity: INFO message: "replay \\"a\\": 50 % done" '
                                'instruction_id: "b1" log_location: '
                                '"/x/pipelines/progress.py:40" thread: "7"')
    assert keep.filter(line) and line.getMessage() == 'worker: replay "a": 50 % done'
    assert not keep.filter(record(logging.INFO, 'message: "Beam chatter" log_location: '
                                                '"/x/apache_beam/runners/worker.py:3"'))
    assert keep.filter(record(logging.WARNING, 'message: "disk full" log_location: "y:1"'))
    assert not keep.filter(record(logging.WARNING, 'message: "No semi_persistent_directory '
                                                   'found:  User registered objects"'))
