"""Google 2011 source: task runs and jobs with exact semantics, every bad row a dead letter,
headerless columnar CSV equal to the per-row path, config checks, and the shipped parts."""

import functools
import pathlib

import numpy as np
import pandas as pd
import pytest

from pipelines import config as run_config
from pipelines.io import columnar
from pipelines.io.dead_letters import COUNTS, DEAD_LETTERS, ROWS, parse_tagged
from pipelines.io.readers import csv_chunks, iter_lines
from pipelines.sources import google_2011, instance_runs
from tests.helpers import run_cli, run_text_config, sorted_frame, write_gz_lines

MIN = 60_000_000
DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "google_2011"
SUBMIT, SCHEDULE, EVICT, FAIL, FINISH, KILL, UPDATE_RUNNING = 0, 1, 2, 3, 4, 5, 8


def _task(time, type_, job, index, machine="", cpu="0.125", memory="0.25", user="u_task",
          priority=9, missing=""):
    return (f"{time},{missing},{job},{index},{machine},{type_},{user},2,{priority},{cpu},"
            f"{memory},0.0004,0")


def _job(time, type_, job, user="u_job", name=None, logical=None):
    return f"{time},,{job},{type_},{user},3,{name or f'n{job}'},{logical or f'l{job}'}"


def _window(start, job, index, machine=1, cpu="0.05"):
    values = [start, start + 5 * MIN, job, index, machine, cpu, "0.1", "0.11", "0", "0.02",
              "0.15", "0.001", "0.0002", "0.3", "0.002", "1.2", "0.003", "1", "0", "0.04"]
    return ",".join(map(str, values))


GOOD_TASK_EVENTS = [
    # 10:0 was running before the trace window: SUBMIT and SCHEDULE at time 0.
    _task(0, SUBMIT, 10, 0, missing="2"), _task(0, SCHEDULE, 10, 0, machine=1),
    _task(30 * MIN, FINISH, 10, 0, machine=1),
    # 10:1 is scaled up while running and still running at the end (censored).
    _task(5 * MIN, SUBMIT, 10, 1, cpu="", memory=""), _task(6 * MIN, SUBMIT, 10, 1),
    _task(6 * MIN, SCHEDULE, 10, 1, machine=2),
    _task(15 * MIN, UPDATE_RUNNING, 10, 1, machine=2, cpu="0.3"),
    # 11:0 is evicted and rescheduled on another machine: two runs.
    _task(0, SUBMIT, 11, 0, user="u_bob"), _task(0, SCHEDULE, 11, 0, machine=2, user="u_bob"),
    _task(20 * MIN, EVICT, 11, 0, machine=2, user="u_bob"),
    _task(21 * MIN, SUBMIT, 11, 0, user="u_bob"),
    _task(25 * MIN, SCHEDULE, 11, 0, machine=1, user="u_bob", priority=0),
    _task(40 * MIN, KILL, 11, 0, machine=1, user="u_bob"),
    # 12:0 is scheduled twice without an end between: the first SCHEDULE is a dead letter.
    _task(MIN, SCHEDULE, 12, 0, machine=3), _task(2 * MIN, SCHEDULE, 12, 0, machine=3),
    _task(3 * MIN, FAIL, 12, 0, machine=3),
    # 13:0 is killed before it is scheduled: no run.
    _task(MIN, SUBMIT, 13, 0), _task(2 * MIN, KILL, 13, 0),
]
BAD_TASK_EVENTS = [  # (line, reason)
    ("x" + _task(0, SUBMIT, 14, 0), "time is not an integer: 'x0'"),
    (_task(-5, SUBMIT, 14, 0), "time is below 0: -5"),
    (_task(0, 9, 14, 0), "unknown event_type 9"),
    (_task(0, SUBMIT, "", 0), "missing job_id"),
    (_task(0, SUBMIT, 14, -1), "task_index is below 0: -1"),
    (_task(0, SUBMIT, 14, 0, cpu="-0.5"), "cpu_request is below 0: -0.5"),
    (_task(0, SUBMIT, 14, 0, memory="nan"), "memory_request is not finite: 'nan'"),
    ("1,2,3", "CSV row has 3 fields, expected 13"),
]
GOOD_JOB_EVENTS = [
    _job(0, SUBMIT, 10, name="web-0"), _job(0, SCHEDULE, 10, name="web-0"),
    _job(0, SUBMIT, 11), _job(MIN, SCHEDULE, 11), _job(20 * MIN, EVICT, 11),
    _job(21 * MIN, SUBMIT, 11), _job(25 * MIN, SCHEDULE, 11), _job(40 * MIN, FINISH, 11),
    _job(MIN, SCHEDULE, 12), _job(3 * MIN, FAIL, 12),
    _job(5 * MIN, SCHEDULE, 15), _job(10 * MIN, FAIL, 15), _job(12 * MIN, SUBMIT, 15),
    _job(15 * MIN, SCHEDULE, 15),
    _job(MIN, SUBMIT, 13), _job(2 * MIN, KILL, 13),
]
BAD_JOB_EVENTS = [
    (_job(0, 11, 16), "unknown event_type 11"),
    (_job(0, SUBMIT, "1.5"), "job_id is not an integer: '1.5'"),
]
GOOD_MACHINE_EVENTS = ["0,1,0,p1,0.5,0.5", "0,2,0,p2,1,1", "0,3,0,p1,0.5,0.25",
                       f"{30 * MIN},3,2,p1,0.5,0.5", f"{50 * MIN},2,1,,,"]
BAD_MACHINE_EVENTS = [("0,4,3,p1,0.5,0.5", "unknown event_type 3"),
                      ("0,4,0,p1,-1,0.5", "cpus is below 0: -1.0")]
GOOD_TASK_USAGE = ([_window(t * 5 * MIN, 10, 0) for t in range(6)]
                   + [_window(t * 5 * MIN, 10, 1, machine=2) for t in range(2, 5)]
                   + [_window(0, 11, 0, machine=2), _window(25 * MIN, 11, 0)])
UNJOINABLE_USAGE = [_window(0, 99, 0)]
BAD_TASK_USAGE = [
    (_window(0, 10, 0).replace(f"0,{5 * MIN},", "0,0,", 1), "end_time 0 is not after "
                                                             "start_time 0"),
    (_window(0, 10, 0, cpu="-0.1"), "cpu_rate is below 0: -0.1"),
    (_window(0, 10, 0, machine=""), "missing machine_id"),
]
TABLES = {
    "task_events": (GOOD_TASK_EVENTS, BAD_TASK_EVENTS),
    "job_events": (GOOD_JOB_EVENTS, BAD_JOB_EVENTS),
    "machine_events": (GOOD_MACHINE_EVENTS, BAD_MACHINE_EVENTS),
    "task_usage": (GOOD_TASK_USAGE + UNJOINABLE_USAGE, BAD_TASK_USAGE),
}


def _write_trace(root, tables=TABLES):
    """Each table as two gzipped parts, the bad rows in the second."""
    for table, (good, bad) in tables.items():
        (root / table).mkdir(parents=True)
        write_gz_lines(root / table / "part-00000-of-00002.csv.gz", good)
        write_gz_lines(root / table / "part-00001-of-00002.csv.gz", [line for line, _ in bad]
                       or [good[0]])
    return root


def _config(root, unit="TASKS", tables=tuple(TABLES), extra=""):
    paths = " ".join(f'{t}: "{root}/{t}/part-*.csv.gz"' for t in tables)
    return f"google_2011 {{ unit: {unit} {paths} num_shards: 3 {extra} }}"


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return _write_trace(tmp_path_factory.mktemp("trace"))


@pytest.fixture(scope="module")
def tasks_run(trace):
    return run_text_config(_config(trace), trace / "out_tasks")


@pytest.fixture(scope="module")
def jobs_run(trace):
    return run_text_config(_config(trace, "JOBS", ("job_events", "machine_events")),
                           trace / "out_jobs")


def _rows(frame, columns):
    return [tuple(None if pd.isna(v) else v for v in row)
            for row in frame[list(columns)].itertuples(index=False)]


def test_every_row_is_read_kept_or_rejected_with_its_reason(tasks_run):
    counts = tasks_run["source_counts"].set_index("table")
    dead = tasks_run["dead_letters"]
    # The KILL of 13:0, never scheduled, ends no run: an exclusion, moved from kept.
    assert tasks_run["exclusions"][["stage", "table", "reason", "rows"]].values.tolist() == [
        ["google_2011", "task_events", instance_runs.END_NOT_RUNNING, 1]]
    for table, (good, bad) in TABLES.items():
        # The SCHEDULE of 12:0 followed by another moves from kept to rejected.
        moved = 1 if table == "task_events" else 0
        excluded = 1 if table == "task_events" else 0
        assert tuple(counts.loc[table, ["read", "kept", "rejected"]]) == (
            len(good) + len(bad), len(good) - moved - excluded, len(bad) + moved), table
        assert counts.loc[table, "parts"] == "00000-00001 of 00002", table
        joined = 1 if table == "task_usage" else 0  # the window the join rejects
        assert (dead.table == table).sum() == len(bad) + moved + joined, table
        for line, expected in bad:
            assert ((dead.reason == expected) & (dead.raw == line)).sum() == 1, expected
    assert set(dead.source) == {"google_2011"}
    assert tuple(counts.loc["usage_join", ["read", "kept", "rejected"]]) == (
        len(GOOD_TASK_USAGE) + 1, len(GOOD_TASK_USAGE), 1)
    assert dead[dead.table == "task_usage"].reason.tolist().count(
        "no instance event with cpus > 0 and memory > 0 at or before the window start") == 1


def test_task_runs_go_from_schedule_to_the_next_end_event(tasks_run):
    instances = tasks_run["instances"].sort_values(["instance_id", "start_time"])
    assert _rows(instances, (
        "instance_id", "collection_id", "instance_index", "machine_id", "start_time",
        "end_time", "end_type", "cpu_request", "memory_request", "priority",
        "scheduling_class", "user", "collection_name", "collection_logical_name")) == [
        ("10:0", 10, 0, 1, 0, 30 * MIN, "FINISH", 0.125, 0.25, 9, 2, "u_task", "web-0", "l10"),
        ("10:1", 10, 1, 2, 6 * MIN, None, None, 0.125, 0.25, 9, 2, "u_task", "web-0", "l10"),
        ("11:0", 11, 0, 2, 0, 20 * MIN, "EVICT", 0.125, 0.25, 9, 2, "u_bob", "n11", "l11"),
        ("11:0", 11, 0, 1, 25 * MIN, 40 * MIN, "KILL", 0.125, 0.25, 0, 2, "u_bob", "n11",
         "l11"),
        ("12:0", 12, 0, 3, 2 * MIN, 3 * MIN, "FAIL", 0.125, 0.25, 9, 2, "u_task", "n12", "l12"),
    ]
    assert set(instances.pool) == {"cell"}
    assert instances.collection_type.isna().all() and instances.vm_category.isna().all()
    dead = tasks_run["dead_letters"]
    twice = dead[dead.reason.str.startswith("SCHEDULE followed by another SCHEDULE")]
    assert len(twice) == 1 and '"time": 60000000' in twice.raw.iloc[0]


def test_usage_carries_the_request_in_force_and_the_trace_measures(tasks_run):
    usage = tasks_run["usage"]
    scaled = usage[usage.instance_id == "10:1"].sort_values("start_time")
    assert scaled.cpu_limit.tolist() == [0.125, 0.3, 0.3]  # the update at 15 min
    first = usage[usage.instance_id == "10:0"].sort_values("start_time").iloc[0]
    assert (first.avg_cpu, first.max_cpu, first.avg_memory, first.max_memory) == (
        0.05, 0.3, 0.1, 0.15)
    assert (first.machine_id, first.end_time - first.start_time) == (1, 5 * MIN)
    assert usage.cpu_usage_distribution.isna().all()
    assert usage.tail_cpu_usage_distribution.isna().all()
    assert usage.priority.notna().all() and usage.scheduling_class.eq(2).all()


def test_machines_keep_each_event_with_its_capacities(tasks_run):
    machines = tasks_run["machines"].sort_values(["machine_id", "time"])
    assert _rows(machines, ("machine_id", "time", "event_type", "cpu_capacity",
                            "memory_capacity", "platform_id", "pool")) == [
        (1, 0, "ADD", 0.5, 0.5, "p1", "cell"), (2, 0, "ADD", 1.0, 1.0, "p2", "cell"),
        (2, 50 * MIN, "REMOVE", None, None, None, "cell"),
        (3, 0, "ADD", 0.5, 0.25, "p1", "cell"), (3, 30 * MIN, "UPDATE", 0.5, 0.5, "p1", "cell"),
    ]


def test_jobs_go_from_first_schedule_to_final_end(jobs_run):
    jobs = jobs_run["instances"].sort_values("instance_id")
    assert _rows(jobs, ("instance_id", "collection_id", "start_time", "end_time", "end_type",
                        "user", "scheduling_class", "collection_name",
                        "collection_logical_name")) == [
        ("10", 10, 0, None, None, "u_job", 3, "web-0", "l10"),  # at time 0, still running
        ("11", 11, MIN, 40 * MIN, "FINISH", "u_job", 3, "n11", "l11"),  # evicted, rerun
        ("12", 12, MIN, 3 * MIN, "FAIL", "u_job", 3, "n12", "l12"),
        ("15", 15, 5 * MIN, None, None, "u_job", 3, "n15", "l15"),  # rescheduled after FAIL
    ]  # 13 never ran: no row
    for column in ("instance_index", "machine_id", "cpu_request", "memory_request",
                   "priority"):
        assert jobs[column].isna().all(), column
    counts = jobs_run["source_counts"].set_index("table")
    # The KILL of 13, never scheduled, is an exclusion; read = kept + rejected + excluded.
    assert tuple(counts.loc["job_events", ["read", "kept", "rejected"]]) == (
        len(GOOD_JOB_EVENTS) + 2, len(GOOD_JOB_EVENTS) - 1, 2)
    assert jobs_run["exclusions"][["stage", "table", "reason", "rows"]].values.tolist() == [
        ["google_2011", "job_events", instance_runs.END_NOT_RUNNING, 1]]
    assert jobs_run["usage"].empty and len(jobs_run["machines"]) == 5


def test_an_end_event_after_the_trace_end_leaves_the_run_censored():
    after_end = 2**63 - 1  # the schema's time of events after the trace end
    tasks = [_task(MIN, SCHEDULE, 16, 0, machine=1), _task(after_end, FINISH, 16, 0, machine=1)]
    jobs = [_job(MIN, SCHEDULE, 16), _job(after_end, KILL, 16)]
    parsed = {}
    for parser, lines in ((google_2011.TaskEventParser(), tasks),
                          (google_2011.JobEventParser(), jobs)):
        columns = google_2011.TABLES[parser.table][0]
        chunk = next(csv_chunks(iter(lines), fieldnames=list(columns)))
        parsed[parser.table], dead = parser.parse(chunk)
        assert dead.num_rows == 0
    runs, _ = instance_runs.build_instances(parsed["task_events"], parsed["job_events"], "cell",
                                            google_2011.TRACE)
    for instances in (runs, google_2011.job_instances(parsed["job_events"], "cell")):
        assert instances.select(["start_time", "end_time", "end_type"]).to_pylist() == [
            {"start_time": MIN, "end_time": None, "end_type": None}]


def test_the_per_row_path_gives_the_same_tables(trace, tasks_run, monkeypatch):
    monkeypatch.setattr(google_2011, "ReadGoogle2011", functools.partial(
        google_2011.ReadGoogle2011, columnar_readers=False))
    per_row = run_text_config(_config(trace), trace / "out_per_row")
    for name in ("instances", "usage", "machines", "dead_letters", "source_counts"):
        assert sorted_frame(per_row[name]).equals(sorted_frame(tasks_run[name])), name


def test_a_corrupt_gz_part_fails_the_run_naming_it(tmp_path, capsys):
    root = _write_trace(tmp_path / "trace", {"task_events": (GOOD_TASK_EVENTS, [])})
    part = root / "task_events" / "part-00001-of-00002.csv.gz"
    data = part.read_bytes()
    part.write_bytes(data[:len(data) // 2])
    config = tmp_path / "cut.textproto"
    config.write_text(_config(root, tables=("task_events",)))
    assert run_cli(config, tmp_path / "out") == 1
    assert (f"fleetcast: run failed: {part}: not a valid gzip file: the file ends before its "
            "end-of-stream marker (truncated?)") in capsys.readouterr().err


# Headerless columnar CSV against the per-row reference ---------------------------------------

# Texts the per-row path reads in its own way, for a column of each kind.
ODD_INTS = ["", " 5", "+5", "1e3", "5.0", "-1", "x", "\u0661", "9223372036854775807",
            "9223372036854775808"]
ODD_FLOATS = ["", "nan", "inf", "-0.5", "1e400", ".5", "0.5 ", "1_0", "abc"]
ODD_TEXTS = ["", '"a,""b"""', "\u00e9t\u00e9"]


def _random_lines(table: str, seed: int, num_rows: int = 1500):
    """Random rows of `table` in the trace's column order, with odd texts injected."""
    rng = np.random.default_rng(seed)
    columns, parser_class = google_2011.TABLES[table]
    kinds = {f.path[0]: f.kind for f in parser_class.fields}
    lines = []
    for _ in range(num_rows):
        values = []
        for name in columns:
            kind = kinds.get(name)
            if name == "event_type":
                values.append(str(int(rng.integers(0, 10))))
            elif kind == columnar.TEXT:
                values.append(f"h{int(rng.integers(0, 50))}=")
            elif kind == columnar.FLOAT or kind is None:
                values.append("" if rng.random() < 0.05 else repr(round(float(rng.random()), 6)))
            else:
                values.append(str(int(rng.integers(0, 10**12))))
        if rng.random() < 0.1:
            column = int(rng.integers(0, len(columns)))
            odd = {columnar.INT: ODD_INTS, columnar.FLOAT: ODD_FLOATS,
                   columnar.TEXT: ODD_TEXTS}.get(kinds.get(columns[column]), ODD_FLOATS)
            values[column] = odd[int(rng.integers(0, len(odd)))]
        lines.append(",".join(values).encode())
    for extra in (b"1,2,3", b"", b"\xff,1", b"0," * 25 + b"0"):
        lines.insert(int(rng.integers(0, len(lines))), extra)
    return lines


def _collected(pairs, schema):
    pairs = list(pairs)
    rows = [r for tag, v in pairs if tag == ROWS for r in v.to_pylist()]
    assert all(v.schema == schema for tag, v in pairs if tag == ROWS)
    dead = sorted((d["reason"], d["raw"]) for tag, v in pairs if tag == DEAD_LETTERS
                  for d in v.to_pylist())
    totals = np.sum([v[1] for tag, v in pairs if tag == COUNTS], axis=0).tolist()
    return sorted(rows, key=repr), dead, totals


@pytest.mark.parametrize("table", sorted(google_2011.TABLES))
@pytest.mark.parametrize("seed", [0, 1])
def test_headerless_columnar_csv_equals_the_per_row_path(table, seed):
    data = b"\n".join(_random_lines(table, seed)) + b"\n"
    blocks = [data[i:i + 4096] for i in range(0, len(data), 4096)]
    columns, parser_class = google_2011.TABLES[table]
    parser = google_2011._Columns(parser_class())
    expected = _collected((pair for chunk in csv_chunks(iter_lines(blocks), chunk_rows=300,
                                                        fieldnames=list(columns))
                           for pair in parse_tagged(chunk, parser.row_parser)),
                          parser.row_parser.schema)
    got = _collected(columnar.parse_csv_file(columnar.line_pieces(blocks, 1 << 14), parser,
                                             fieldnames=list(columns)),
                     parser.row_parser.schema)
    assert got[2] == expected[2]
    assert got[1] == expected[1]
    assert got[0] == expected[0]
    assert expected[2][2] > 20 and expected[2][1] > 500  # odd rows rejected, most kept


# Config checks ------------------------------------------------------------------------------


def _problems(text):
    return [str(p) for p in run_config.validate(run_config.parse_config(text),
                                                check_inputs=False)]


@pytest.mark.parametrize("source, problem", [
    ('unit: TASKS job_events: "j*"',
     "google_2011.task_events: is required with unit TASKS"),
    ('unit: JOBS machine_events: "m*"',
     "google_2011.job_events: is required with unit JOBS"),
    ('unit: JOBS job_events: "j*" task_usage: "u*"',
     "google_2011.task_usage: is unused with unit JOBS (jobs come from job_events alone): "
     "remove it, or use unit TASKS"),
    ('unit: UNIT_UNSPECIFIED job_events: "j*"',
     "google_2011.unit: is UNIT_UNSPECIFIED: TASKS or JOBS"),
    ('task_events: "t*" num_shards: 0', "google_2011.num_shards: must be > 0, got 0"),
    ('task_events: "t*" pool: " "', "google_2011.pool: is empty: give a pool name"),
])
def test_a_wrong_source_names_the_field(source, problem):
    assert _problems(f"google_2011 {{ {source} }}") == [problem]


PLACEMENT = "placement { policy: BEST_FIT lifetime_source { oracle: true } }"


def test_placement_takes_hosts_from_the_config_without_machine_events():
    without = f'google_2011 {{ task_events: "t*" }} {PLACEMENT}'
    assert _problems(without) == [
        "placement.host_shape: is required: this trace has no hosts"]
    assert _problems(f'google_2011 {{ task_events: "t*" machine_events: "m*" }} {PLACEMENT}') \
        == []


@pytest.mark.slow  # numba compiles the replay engine once per machine (~25 s)
def test_placement_on_trace_tasks_with_a_configured_host_shape(trace):
    tables = run_text_config(
        _config(trace, tables=("task_events", "job_events"))
        + " placement { policy: BEST_FIT lifetime_source { oracle: true } "
          "host_shape { cpu: 1 memory: 1 } host_count: 4 }", trace / "out_placement")
    assert tables["machines"].empty
    summary = tables["placement_summary"]
    assert (summary.failed_placements == 0).all() and set(summary.policy) == {"best_fit"}


# The shipped parts (../shared/data/google_2011) ----------------------------------------------


def _real_config(unit, tables):
    if not DATA.exists():
        pytest.skip(f"Google 2011 parts not found at {DATA} (../shared/data)")
    paths = " ".join(f'{t}: "{DATA}/{t}/part-*-of-00500.csv.gz"' for t in tables)
    return f"google_2011 {{ unit: {unit} {paths} num_shards: 8 }}"


@pytest.mark.real_data
@pytest.mark.slow
def test_real_parts_as_task_runs(tmp_path):
    tables = run_text_config(_real_config("TASKS", ("job_events", "task_events")), tmp_path)
    counts = tables["source_counts"].set_index("table")
    # DATA/README.md: job_events parts 0-249 (~1.0M rows), task_events parts 0-13.
    numbers = ["read", "kept", "rejected"]
    assert counts.loc["job_events", numbers].tolist() == [947_761, 947_761, 0]
    # End events that end no run (tasks killed while pending, mostly) are exclusions: read =
    # kept + rejected + excluded. The parts are whole (a prefix), so no run is left out.
    assert counts.loc["task_events", numbers].tolist() == [2_609_335, 2_579_781, 0]
    assert tables["exclusions"][["table", "reason", "rows"]].values.tolist() == [
        ["task_events", instance_runs.END_NOT_RUNNING, 29_554]]
    assert counts.parts.to_dict() == {"job_events": "00000-00249 of 00500",
                                      "task_events": "00000-00013 of 00500"}
    runs = tables["instances"]
    # One run per SCHEDULE (no SCHEDULE follows another without an end), of 573,602 tasks.
    assert len(runs) == 890_517 and runs.instance_id.nunique() == 573_602
    assert not runs.duplicated(["instance_id", "start_time"]).any()
    assert runs.end_time.isna().sum() == 137_578 and (runs.start_time == 0).sum() == 132_982
    ended = runs.dropna(subset=["end_time"])
    assert (ended.end_time > ended.start_time).all()
    assert runs.end_type.dropna().isin(["EVICT", "FAIL", "FINISH", "KILL"]).all()
    assert runs.collection_name.notna().all() and runs.user.notna().all()
    assert runs.machine_id.notna().all() and runs.cpu_request.dropna().between(0, 1).all()
    # Runs with no event requesting cpus > 0 and memory > 0 (tasks requesting 0 CPU) have
    # no request.
    assert runs.cpu_request.isna().sum() == 4_095
    assert tables["dead_letters"].empty


@pytest.mark.real_data
@pytest.mark.slow
def test_real_parts_as_jobs(tmp_path):
    tables = run_text_config(_real_config("JOBS", ("job_events",)), tmp_path)
    jobs = tables["instances"]
    # 317,280 jobs, one of them never scheduled (submitted in the last part).
    assert len(jobs) == 317_279 and jobs.instance_id.is_unique
    assert jobs.end_time.isna().sum() == 4_083 and (jobs.start_time == 0).sum() == 3_984
    assert jobs.end_type.value_counts().to_dict() == {
        "FINISH": 185_640, "KILL": 123_506, "FAIL": 4_022, "EVICT": 14, "LOST": 14}
    lifetime_s = (jobs.end_time - jobs.start_time).dropna() / 1e6
    assert (lifetime_s > 0).all() and 60 < lifetime_s.median() < 600
    assert jobs.user.nunique() > 500 and jobs.collection_logical_name.notna().all()
    assert tables["exclusions"].empty
