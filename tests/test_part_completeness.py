"""A trace's parts are whole or the run says so: a gap in part numbers fails naming the missing
parts unless allow_missing_parts, and within a subset every event is kept, rejected or
excluded with its reason (Google 2011 and v3 on hand-made parts); shards without a request, a
SCHEDULE after the trace end, and hosts sized by the peak demand."""

import json

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest

from configs import fleetcast_pb2
from pipelines import config as run_config
from pipelines.io.failures import RunFailed
from pipelines.io.readers import RowChunk
from pipelines.sources import google_2011, google_v3, instance_runs, parts
from pipelines.stages.placement import pools
from policies.replay.pool import peak_demand_time
from policies.replay.simulator import PlacementTrace
from tests.helpers import run_cli, run_text_config, write_gz_lines

MIN = 60_000_000
AFTER_END = 2**63 - 1
# Event codes per trace: (SUBMIT, SCHEDULE, FINISH, KILL, FAIL).
CODES = {"google_2011": (0, 1, 4, 5, 3), "google_v3": (0, 3, 6, 7, 5)}
# Task events of the four parts 0-3, part 2 missing: (minutes or AFTER_END, event, job).
# Every task is index 0 of its job; job 23 is killed at 25 min (in job_events).
PARTS = {
    0: [(0, "SUBMIT", 20), (1, "SCHEDULE", 20),  # still running at the end: kept, censored
        (0, "SUBMIT", 21), (2, "SCHEDULE", 21),  # ends after the gap: a run across it
        (0, "SUBMIT", 23), (4, "SCHEDULE", 23),  # no end, its job ended at 25: excluded
        (5, "SCHEDULE", 24), (8, "FINISH", 24)],  # kept
    1: [(12, "SCHEDULE", 25), (15, "FINISH", 25),  # kept; 15 min: the last before the gap
        (11, "SUBMIT", 28), (13, "KILL", 28),  # killed while pending: ends no run
        (14, "SCHEDULE", 31)],  # then SCHEDULE at 34: a run across the gap, no dead letter
    2: [(22, "FINISH", 21), (23, "SCHEDULE", 21), (25, "KILL", 23), (21, "SCHEDULE", 26),
        (24, "FAIL", 31)],
    3: [(31, "SCHEDULE", 27), (36, "FINISH", 27),  # kept; 31 min: the first after the gap
        (35, "FINISH", 21),
        (33, "FINISH", 26),  # its SCHEDULE is in the missing part: no earlier event
        (32, "SUBMIT", 29), (AFTER_END, "SCHEDULE", 29), (AFTER_END, "FINISH", 29),
        (38, "SUBMIT", 30),  # the last event read
        (34, "SCHEDULE", 31), (37, "FINISH", 31)],
}
READ_PARTS = (0, 1, 3)
JOBS = (20, 21, 23, 24, 25, 26, 27, 28, 29, 30, 31)
EXPECTED_RUNS = [("20:0", 1 * MIN, None), ("24:0", 5 * MIN, 8 * MIN),
                 ("25:0", 12 * MIN, 15 * MIN), ("27:0", 31 * MIN, 36 * MIN),
                 ("31:0", 34 * MIN, 37 * MIN)]
EXPECTED_EXCLUSIONS = {instance_runs.ACROSS_GAP: 2, instance_runs.STILL_RUNNING: 1,
                       instance_runs.END_NOT_RUNNING: 1, instance_runs.END_FIRST: 1,
                       instance_runs.AFTER_END_SCHEDULE: 1}


def _time(minutes):
    return AFTER_END if minutes == AFTER_END else minutes * MIN


def _code(source, event):
    return CODES[source][("SUBMIT", "SCHEDULE", "FINISH", "KILL", "FAIL").index(event)]


def _task_2011(minutes, event, job, cpu="0.125", memory="0.25"):
    return (f"{_time(minutes)},,{job},0,1,{_code('google_2011', event)},u,2,9,{cpu},{memory},"
            "0,0")


def _job_events_2011():
    return ([f"0,,{job},0,u,3,n{job},l{job}" for job in JOBS]
            + [f"{4 * MIN},,23,1,u,3,n23,l23", f"{25 * MIN},,23,5,u,3,n23,l23"])


def _event_v3(minutes, event, job, cpus=0.125, memory=0.25):
    return json.dumps({"time": _time(minutes), "type": _code("google_v3", event),
                       "collection_id": job, "instance_index": 0, "machine_id": 1,
                       "resource_request": {"cpus": cpus, "memory": memory}, "priority": 9,
                       "scheduling_class": 2})


def _collection_events_v3():
    rows = [{"time": 0, "type": 0, "collection_id": job, "user": "u"} for job in JOBS]
    rows += [{"time": 4 * MIN, "type": 3, "collection_id": 23, "user": "u"},
             {"time": 25 * MIN, "type": 7, "collection_id": 23, "user": "u"}]
    return [json.dumps(r) for r in rows]


def _write_parts(root, events, jobs, event_line, job_lines, numbers):
    """Writes the parts `numbers` of table `events` (name: its file-name pattern) and the one
    part of `jobs` under `root`."""
    (events_dir, events_name), (jobs_dir, jobs_name) = events, jobs
    (root / events_dir).mkdir(parents=True)
    (root / jobs_dir).mkdir()
    for n in numbers:
        write_gz_lines(root / events_dir / events_name.format(n=n, of=4),
                       [event_line(*event) for event in PARTS[n]])
    write_gz_lines(root / jobs_dir / jobs_name.format(n=0, of=1), job_lines())
    return root


def _write_2011(root, numbers=READ_PARTS):
    return _write_parts(root, ("task_events", "part-{n:05d}-of-{of:05d}.csv.gz"),
                        ("job_events", "part-{n:05d}-of-{of:05d}.csv.gz"), _task_2011,
                        _job_events_2011, numbers)


def _write_v3(root, numbers=READ_PARTS):
    return _write_parts(
        root, ("instance_events", "instance_events-{n:05d}-of-{of:05d}.json.gz"),
        ("collection_events", "collection_events-{n:05d}-of-{of:05d}.json.gz"), _event_v3,
        _collection_events_v3, numbers)


def _config_2011(root, extra=""):
    return (f'google_2011 {{ unit: TASKS task_events: "{root}/task_events/part-*.csv.gz" '
            f'job_events: "{root}/job_events/part-*.csv.gz" num_shards: 3 {extra} }}')


def _config_v3(root, extra=""):
    return (f'google_v3 {{ instance_events {{ path: "{root}/instance_events/*.json.gz" }} '
            f'collection_events {{ path: "{root}/collection_events/*.json.gz" }} '
            f"num_shards: 3 {extra} }}")


SOURCES = {"google_2011": (_write_2011, _config_2011, "task_events", "task_events"),
           "google_v3": (_write_v3, _config_v3, "instance_events", "instance_events.path")}


# Part numbers, by file name ------------------------------------------------------------------

def test_whole_parts_and_a_prefix_pass_and_say_what_was_read():
    whole = parts.of_files([f"t/part-{n:05d}-of-00500.csv.gz" for n in (2, 0, 1)])
    assert whole.problem(False) is None and whole.describe() == "00000-00002 of 00500"
    export = parts.of_files([f"gs://b/instance_events-{n:012d}.json.gz" for n in range(3)])
    assert export.problem(False) is None
    assert export.describe() == "000000000000-000000000002"
    assert parts.of_files(["t/events.json", "t/notes.txt"]).describe() is None
    # A 12-digit date is not a part number.
    dated = parts.of_files(["t/usage-201911010000.json", "t/usage-201912010000.json"])
    assert dated.describe() is None and dated.problem(False) is None


def test_a_gap_names_the_missing_parts_unless_accepted():
    found = parts.of_files([f"t/part-{n:05d}-of-00500.csv.gz"
                            for n in (*range(14), *range(15, 18), 20)])
    assert found.problem(False) == (
        "3 parts missing: 00014, 00018-00019 of 00500 (read 00000-00013, 00015-00017, "
        "00020): fetch them, or set allow_missing_parts: true to read this subset")
    assert found.problem(True) is None
    assert found.describe() == ("00000-00013, 00015-00017, 00020 of 00500 (00014, "
                                "00018-00019 missing)")
    assert found.gap_neighbours() == [("t/part-00013-of-00500.csv.gz",
                                       "t/part-00015-of-00500.csv.gz"),
                                      ("t/part-00017-of-00500.csv.gz",
                                       "t/part-00020-of-00500.csv.gz")]


@pytest.mark.parametrize("names, problem", [
    (["part-00000-of-00500.csv.gz", "part-00001-of-00250.csv.gz"],
     "files of 2 part counts (-of-00250, -of-00500): one table's parts share one count"),
    (["a/part-00000-of-00002.csv.gz", "b/part-00000-of-00002.csv"],
     "part 00000 is given by 2 files (a/part-00000-of-00002.csv.gz, "
     "b/part-00000-of-00002.csv): its rows would be read twice"),
    (["part-00002-of-00002.csv.gz"], "part 00002 of 00002 is numbered beyond its count"),
])
def test_parts_that_cannot_be_one_table_are_refused_even_when_gaps_are_accepted(names,
                                                                               problem):
    assert parts.of_files(names).problem(True) == problem


# A gap in the parts given ------------------------------------------------------------------

@pytest.mark.parametrize("source", sorted(SOURCES))
def test_a_gap_fails_the_run_in_one_line_naming_the_missing_part(tmp_path, capsys, source):
    write, config_text, _, field = SOURCES[source]
    root = write(tmp_path / "trace")
    config = tmp_path / "gap.textproto"
    config.write_text(config_text(root))
    assert run_cli(config, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert f"{source}.{field}: 1 part missing: 00002 of 00004 (read 00000-00001, 00003): " \
           "fetch them, or set allow_missing_parts: true to read this subset" in err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()
    # Without the config check (a program building the pipeline), the reader refuses too.
    message = run_config.parse_config(config_text(root))
    reader = {"google_2011": google_2011.ReadGoogle2011,
              "google_v3": google_v3.ReadGoogleV3}[source]
    with pytest.raises(RunFailed, match=r"1 part missing: 00002 of 00004"):
        _ = beam.Pipeline() | reader(getattr(message, source))


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_an_accepted_gap_accounts_for_every_event(tmp_path, source):
    write, config_text, table, _ = SOURCES[source]
    root = write(tmp_path / "trace")
    tables = run_text_config(config_text(root, "allow_missing_parts: true"), tmp_path / "out")
    runs = tables["instances"].sort_values("instance_id")
    assert [(r.instance_id, r.start_time, None if np.isnan(r.end_time) else r.end_time)
            for r in runs.itertuples()] == EXPECTED_RUNS
    excluded = tables["exclusions"]
    assert set(excluded.stage) == {source} and set(excluded.table) == {table}
    assert dict(zip(excluded.reason, excluded.rows)) == EXPECTED_EXCLUSIONS
    counts = tables["source_counts"].set_index("table")
    read = sum(len(PARTS[n]) for n in READ_PARTS)
    assert tuple(counts.loc[table, ["read", "kept", "rejected"]]) == (
        read, read - sum(EXPECTED_EXCLUSIONS.values()), 0)
    assert counts.loc[table, "parts"] == "00000-00001, 00003 of 00004 (00002 missing)"
    assert tables["dead_letters"].empty


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_whole_parts_are_read_without_the_field(tmp_path, source):
    write, config_text, table, _ = SOURCES[source]
    root = write(tmp_path / "trace", numbers=(0, 1, 2, 3))
    tables = run_text_config(config_text(root), tmp_path / "out")
    counts = tables["source_counts"].set_index("table")
    assert counts.loc[table, "parts"] == "00000-00003 of 00004"
    # With part 2 the runs close: 21:0 ends at 22 and is rescheduled, 23:0 is killed, 26:0
    # starts, 31:0 fails at 24; only the pending kill and the SCHEDULE after the trace end
    # are excluded.
    excluded = tables["exclusions"]
    assert dict(zip(excluded.reason, excluded.rows)) == {
        instance_runs.END_NOT_RUNNING: 1, instance_runs.AFTER_END_SCHEDULE: 1}
    assert len(tables["instances"]) == 10 and tables["dead_letters"].empty


def test_validate_names_the_gap_as_a_missing_input(tmp_path):
    root = _write_2011(tmp_path / "trace")
    config = run_config.parse_config(_config_2011(root))
    problems = run_config.validate(config)
    assert [(p.field, p.missing_input) for p in problems] == [
        ("google_2011.task_events", True)]
    assert run_config.validate(run_config.parse_config(
        _config_2011(root, "allow_missing_parts: true"))) == []


# A run that cannot be checked against the whole table ----------------------------------------

def _events_2011(lines):
    columns = google_2011.TABLES["task_events"][0]
    return google_2011.TaskEventParser().parse(RowChunk(
        [dict(zip(columns, line.split(","))) for line in lines], [None] * len(lines)))[0]


def test_a_schedule_after_the_trace_end_is_excluded_never_an_instance():
    v3_events = google_v3.InstanceEventParser().parse(RowChunk(
        [json.loads(_event_v3(1, "SUBMIT", 6)), json.loads(_event_v3(AFTER_END, "SCHEDULE", 6))],
        [None] * 2))[0]
    for events, trace in (
            (_events_2011([_task_2011(1, "SUBMIT", 6), _task_2011(AFTER_END, "SCHEDULE", 6)]),
             google_2011.TRACE), (v3_events, google_v3.TRACE)):
        instances, dead, excluded = instance_runs.build_runs(
            events, trace.collections.empty_table(), "cell", trace)
        assert instances.num_rows == 0 and dead.num_rows == 0
        assert excluded == {instance_runs.AFTER_END_SCHEDULE: 1}
    jobs = google_2011.JobEventParser().parse(RowChunk(
        [dict(zip(google_2011.JOB_EVENTS_COLUMNS, line.split(","))) for line in
         (f"{MIN},,6,0,u,3,n,l", f"{AFTER_END},,6,1,u,3,n,l")], [None] * 2))[0]
    instances, excluded = google_2011.job_runs(jobs, "cell")
    assert instances.num_rows == 0 and excluded == {instance_runs.AFTER_END_SCHEDULE: 1}


def test_a_shard_whose_events_request_nothing_builds_runs_with_a_null_request():
    events = _events_2011([_task_2011(1, "SCHEDULE", 5, cpu="", memory=""),
                           _task_2011(2, "FINISH", 5, cpu="", memory="")])
    shard = (0, {"events": [events], "usage": [], "collections": []})
    pairs = list(instance_runs.build_shard(shard, "cell", google_2011.TRACE))
    [instances] = [value for tag, value in pairs if tag == "instances"]
    assert instances.select(["instance_id", "cpu_request", "memory_request"]).to_pylist() == [
        {"instance_id": "5:0", "cpu_request": None, "memory_request": None}]


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_tasks_without_a_request_in_shards_of_their_own_at_the_shard_bound(tmp_path, source):
    write, config_text, _, _ = SOURCES[source]
    root = write(tmp_path / "trace", numbers=(0, 1, 2, 3))
    extra = tmp_path / "trace" / ("task_events" if source == "google_2011"
                                  else "instance_events")
    lines = ([_task_2011(1, "SCHEDULE", 40, cpu="", memory=""), _task_2011(3, "FINISH", 40)]
             if source == "google_2011" else
             [json.dumps({**json.loads(_event_v3(1, "SCHEDULE", 40)),
                          "resource_request": None}), _event_v3(3, "FINISH", 40, cpus=0)])
    for path in extra.iterdir():  # into part 0, beside the other tasks
        if "00000-of" in path.name:
            path.unlink()
            write_gz_lines(path, [(_task_2011 if source == "google_2011" else _event_v3)(*e)
                                  for e in PARTS[0]] + lines)
    text = config_text(root).replace("num_shards: 3", "num_shards: 10000")
    tables = run_text_config(text, tmp_path / "out")
    runs = tables["instances"].set_index("instance_id")
    assert runs.loc["40:0", ["cpu_request", "memory_request"]].isna().all()
    assert runs.loc["24:0", "cpu_request"] == 0.125


# Hosts sized by the peak demand ---------------------------------------------------------------

def test_hosts_from_peak_demand_say_when_the_peak_was():
    # CPU of live VMs: 0.2 at 1 min, 0.4 at 3, 0.6 at 5 (the peak), 0.4 at 8.
    trace = PlacementTrace(np.array([1, 3, 5]) * MIN, np.array([10, 8, 20]) * MIN,
                           np.array([[0.2, 0.1]] * 3))
    assert peak_demand_time(trace.arrival_us, trace.exit_us, trace.demand, 0) == 5 * MIN
    config = fleetcast_pb2.PlacementConfig()
    assert pools.hosts_origin(config, trace) == (pools.HOSTS_FROM_MACHINES, None)
    config.host_shape.cpu, config.host_shape.memory = 0.5, 0.5
    assert pools.hosts_origin(config, trace) == (pools.HOSTS_FROM_PEAK, 5 * MIN)
    config.host_count = 3
    assert pools.hosts_origin(config, trace) == (pools.HOSTS_FROM_COUNT, None)


@pytest.mark.slow  # numba compiles the replay engine once per machine (~25 s)
def test_the_placement_summary_says_its_hosts_come_from_the_peak_demand(tmp_path):
    (tmp_path / "task_events").mkdir()
    write_gz_lines(tmp_path / "task_events" / "part-00000-of-00001.csv.gz", [
        _task_2011(1, "SCHEDULE", 1, cpu="0.2", memory="0.1"),
        _task_2011(10, "FINISH", 1),
        _task_2011(3, "SCHEDULE", 2, cpu="0.2", memory="0.1"), _task_2011(8, "FINISH", 2),
        _task_2011(5, "SCHEDULE", 3, cpu="0.2", memory="0.1"), _task_2011(20, "FINISH", 3),
        _task_2011(2, "SCHEDULE", 4, cpu="", memory=""), _task_2011(4, "FINISH", 4)])
    tables = run_text_config(
        f'google_2011 {{ task_events: "{tmp_path}/task_events/*.csv.gz" num_shards: 4 }} '
        "placement { policy: BEST_FIT lifetime_source { oracle: true } "
        "host_shape { cpu: 0.5 memory: 0.5 } }", tmp_path / "out")
    summary = tables["placement_summary"]
    # 0.6 CPU at 85 % of 0.5 per host: 2 hosts, sized at 5 min.
    assert summary[["num_hosts", "hosts_from", "peak_demand_time_us"]].values.tolist() == [
        [2, "peak_demand", 5 * MIN]]
    excluded = tables["exclusions"]
    assert excluded[excluded.stage == "placement"][["reason", "rows"]].values.tolist() == [
        [pools.REASON_NO_REQUEST, 1]]


def test_coverage_takes_the_latest_time_and_the_gaps_whose_parts_are_in_time_order():
    fn = instance_runs.CoverageFn()
    pieces = [("last", 10), ("last", 38), ("gap", 0, 15, AFTER_END), ("gap", 0, -1, 31),
              ("gap", 1, 40, AFTER_END), ("gap", 1, -1, 20)]  # gap 1: parts overlap in time
    accumulator = fn.merge_accumulators([fn.add_input(fn.create_accumulator(), p)
                                         for p in pieces])
    assert fn.extract_output(accumulator) == instance_runs.Coverage(38, ((15, 31),))
    table = pa.table({"time": pa.array([5, AFTER_END, 3], pa.int64())})
    assert (instance_runs.latest_time(table), instance_runs.earliest_time(table)) == (5, 3)
