"""Tests of the synthetic Google cluster trace v3 generator (the synthetic/ package)."""

import csv
import glob
import gzip
import json
import os

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import synthetic
from synthetic import (
    ENABLE,
    EVICT,
    FAIL,
    FINISH,
    KILL,
    LOST,
    MACHINE_ADD,
    MACHINE_REMOVE,
    SCHEDULE,
    SUBMIT,
    UPDATE_RUNNING,
    Column,
    Fleet,
    Jobs,
    RandomFitReplay,
    Tasks,
    encode_lines,
    generate,
)

TERMINAL = [EVICT, FAIL, FINISH, KILL, LOST]
HOUR_US = 3600 * 10**6
DAY_US = 24 * HOUR_US


def _flatten(record: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in record.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat


def _parse_csv_cell(text: str):
    if text == "":
        return None
    if text.startswith("["):
        return json.loads(text)
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return text


def read_rows(out_dir: str, table: str) -> list[dict]:
    """Every row of a table, records flattened to dotted names, in file order."""
    rows = []
    for path in sorted(glob.glob(os.path.join(out_dir, table, f"{table}-*"))):
        if path.endswith(".parquet"):
            rows += pq.read_table(path).flatten().to_pylist()
        elif path.endswith(".json.gz"):
            with gzip.open(path, "rt") as lines:
                rows += [_flatten(json.loads(line)) for line in lines]
        else:
            with gzip.open(path, "rt", newline="") as text:
                rows += [{k: _parse_csv_cell(v) for k, v in row.items()}
                         for row in csv.DictReader(text)]
    return rows


def read_frame(out_dir: str, table: str) -> pd.DataFrame:
    paths = sorted(glob.glob(os.path.join(out_dir, table, "*.parquet")))
    return pd.concat([pq.read_table(p).flatten().to_pandas() for p in paths], ignore_index=True)


def runs_of(instance_events: pd.DataFrame) -> pd.DataFrame:
    """One row per SCHEDULE with the task's next terminal event (NaN: still running)."""
    events = instance_events[instance_events.type.isin([SCHEDULE] + TERMINAL)].sort_values(
        ["collection_id", "instance_index", "time", "type"], kind="stable")
    following = events.groupby(["collection_id", "instance_index"])[["time", "type"]].shift(-1)
    runs = events[events.type == SCHEDULE].copy()
    runs["end"] = following.loc[runs.index, "time"]
    runs["end_type"] = following.loc[runs.index, "type"]
    assert runs.end_type.dropna().isin(TERMINAL).all()
    return runs.rename(columns={"time": "start"})


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """A moderate trace: 20 machines, 3 days, Parquet."""
    out_dir = str(tmp_path_factory.mktemp("trace"))
    generate(out_dir, machines=20, days=3.0, seed=1, file_format="parquet")
    tables = {t: read_frame(out_dir, t) for t in synthetic.TABLES}
    tables["runs"] = runs_of(tables["instance_events"])
    tables["horizon_us"] = 3 * DAY_US
    return tables


def test_same_arguments_give_identical_files_and_seeds_differ(tmp_path):
    def files(out_dir, seed):
        generate(str(out_dir), machines=4, days=0.5, seed=seed, shards=2)
        paths = sorted(glob.glob(f"{out_dir}/*/*"))
        return {os.path.relpath(p, out_dir): open(p, "rb").read() for p in paths}

    first, again = files(tmp_path / "a", 7), files(tmp_path / "b", 7)
    other = files(tmp_path / "c", 8)
    assert len(first) == 4 * 2
    assert first == again
    assert first.keys() == other.keys()
    for table in synthetic.TABLES:
        name = f"{table}/{table}-00000-of-00002.json.gz"
        assert first[name] != other[name], table


def _files(out_dir) -> dict:
    paths = sorted(p for p in glob.glob(f"{out_dir}/**", recursive=True) if os.path.isfile(p))
    return {os.path.relpath(p, out_dir): open(p, "rb").read() for p in paths}


@pytest.mark.parametrize("file_format", ["json", "parquet"])
def test_a_cell_in_blocks_gives_the_same_files_on_any_number_of_processes(
        tmp_path, monkeypatch, file_format):
    monkeypatch.setattr(synthetic.trace, "BLOCK_MACHINES", 4)
    files = {}
    for processes in (1, 2, 3):
        out_dir = tmp_path / str(processes)
        generate(str(out_dir), machines=10, days=0.25, seed=2, shards=3, processes=processes,
                 file_format=file_format)
        files[processes] = _files(out_dir)
    assert len(files[1]) == 4 * 3
    assert files[1] == files[2] == files[3]


def test_blocks_of_a_cell_share_its_fleet_with_unique_collections(monkeypatch):
    monkeypatch.setattr(synthetic.trace, "BLOCK_MACHINES", 4)
    trace = synthetic.sample_trace(machines=10, days=0.5, seed=4)
    assert len(np.unique(trace.jobs.collection_id)) == len(trace.jobs.collection_id)
    assert set(np.unique(trace.placement.run_machine)) == set(range(10))
    run_job = trace.tasks.job[trace.placement.run_task]
    # Blocks of 3, 4 and 3 machines (np.linspace): a task runs in its job's block only.
    block_of_machine = np.searchsorted([3, 7], trace.placement.run_machine, side="right")
    block_of_job = trace.jobs.collection_id[run_job] % 3
    np.testing.assert_array_equal(block_of_machine, block_of_job)


def test_public_layout_names_files_as_the_trace_buckets(tmp_path):
    summary = generate(str(tmp_path), machines=2, days=0.1, shards=2, layout="public")
    assert summary["paths"]["instance_usage"] == [
        os.path.join(str(tmp_path), f"instance_usage-{i:012d}.json.gz") for i in range(2)]
    assert sorted(os.listdir(tmp_path)) == sorted(
        f"{t}-{i:012d}.json.gz" for t in synthetic.TABLES for i in range(2))


def test_request_scale_scales_requests_and_tasks_per_machine():
    default = synthetic.sample_trace(machines=8, days=1.0, seed=6)
    small = synthetic.sample_trace(machines=8, days=1.0, seed=6, request_scale=0.5)
    np.testing.assert_allclose(small.catalog.cpu_request, 0.5 * default.catalog.cpu_request)
    ratio = len(small.tasks.job) / len(default.tasks.job)
    assert 1.6 < ratio < 2.4


def test_summary_counts_match_files(tmp_path):
    summary = generate(str(tmp_path), machines=3, days=0.25, shards=3, file_format="json")
    for table in synthetic.TABLES:
        assert summary["paths"][table] == [
            os.path.join(str(tmp_path), table, f"{table}-{i:05d}-of-00003.json.gz")
            for i in range(3)]
        assert summary["rows"][table] == len(read_rows(str(tmp_path), table)) > 0


def test_three_file_formats_hold_the_same_rows(tmp_path):
    rows = {}
    for file_format in ("json", "csv", "parquet"):
        out_dir = str(tmp_path / file_format)
        generate(out_dir, machines=3, days=0.25, seed=3, shards=2, file_format=file_format)
        rows[file_format] = {t: read_rows(out_dir, t) for t in synthetic.TABLES}
    for table in synthetic.TABLES:
        assert rows["json"][table] == rows["parquet"][table], table
        assert rows["csv"][table] == rows["parquet"][table], table
    usage = rows["json"]["instance_usage"][0]
    assert len(usage["cpu_usage_distribution"]) == 11
    assert len(usage["tail_cpu_usage_distribution"]) == 9
    assert rows["json"]["instance_events"][0]["constraint"] == []
    assert rows["json"]["machine_events"][0]["missing_data_reason"] is None


def test_encode_lines_exact_text():
    columns = [
        Column("time", "int", np.array([5, 300000000])),
        Column("resource_request.cpus", "float", np.array([0.5, 1.0])),
        Column("resource_request.memory", "float", np.array([1e-7, 0.30000000000000004])),
        Column("missing_type", "null"),
        Column("user", "str", np.array(["a+b=", "c/d"], dtype=object)),
        Column("parent_collection_id", "optional_int", np.array([-1, 42])),
        Column("cpu_usage_distribution", "float_list", np.array([[0.0, 0.25], [2.0, 3.5]])),
        Column("constraint", "empty_constraint_list"),
    ]
    assert bytes(encode_lines(columns, "json")).decode().splitlines() == [
        '{"time":5,"resource_request":{"cpus":0.5,"memory":1e-7},"missing_type":null,'
        '"user":"a+b=","parent_collection_id":null,"cpu_usage_distribution":[0.0,0.25],'
        '"constraint":[]}',
        '{"time":300000000,"resource_request":{"cpus":1.0,"memory":0.30000000000000004},'
        '"missing_type":null,"user":"c/d","parent_collection_id":42,'
        '"cpu_usage_distribution":[2.0,3.5],"constraint":[]}',
    ]
    assert bytes(encode_lines(columns, "csv")).decode().splitlines() == [
        '5,0.5,1e-7,,a+b=,,"[0.0,0.25]","[]"',
        '300000000,1.0,0.30000000000000004,,c/d,42,"[2.0,3.5]","[]"',
    ]


def _replay(machine_events, requests, enable_s, final_s, delay_s=5.0, update=None, horizon_s=1000):
    """Replays hand-made tasks: requests [(cpus, memory)], times in s, machine_events
    [(time_s, machine, type, cpus, memory)]; update = (task, fraction, cpus, memory)."""
    n = len(requests)
    units = np.array([[round(c * 1e5), round(m * 1e5)] for c, m in requests],
                     dtype=np.int64).reshape(n, 2)
    events = np.array([(round(t * 1e6), m, k, round(c * 1e5), round(mem * 1e5))
                       for t, m, k, c, mem in machine_events], dtype=np.int64)
    n_machines = int(events[:, 1].max()) + 1
    fleet = Fleet(np.arange(1, n_machines + 1), np.zeros(n_machines, int),
                  np.zeros(n_machines, int), *events.T)
    zeros = np.zeros(n, dtype=np.int64)
    jobs = Jobs(collection_id=np.arange(n) + 1,
                submit_us=(np.array(enable_s) * 1e6).astype(np.int64),
                enable_us=(np.array(enable_s) * 1e6).astype(np.int64), name=zeros,
                priority=np.full(n, 200), scheduling_class=zeros, scheduler=zeros,
                vertical_scaling=zeros, cpu_request=units[:, 0], memory_request=units[:, 1],
                parent_collection_id=zeros - 1, cpu_utilization=np.full(n, 0.5),
                cpu_spread=np.full(n, 0.2), slow_amplitude=np.zeros((n, 2)),
                slow_period_s=np.ones((n, 2)), slow_phase_rad=np.zeros((n, 2)))
    update_fraction = np.full(n, -1.0)
    update_units = units.copy()
    if update:
        task, fraction, cpus, memory = update
        update_fraction[task] = fraction
        update_units[task] = round(cpus * 1e5), round(memory * 1e5)
    tasks = Tasks(job=np.arange(n), instance_index=zeros, interrupted_us=zeros,
                  interrupted_type=zeros - 1, final_us=(np.array(final_s) * 1e6).astype(np.int64),
                  final_type=np.full(n, FINISH), resubmit_delay_us=np.full(n, int(delay_s * 1e6)),
                  update_fraction=update_fraction, update_cpu=update_units[:, 0],
                  update_memory=update_units[:, 1], cpu_base=np.full(n, 0.01),
                  memory_base=np.full(n, 0.01))
    placement = RandomFitReplay(np.random.default_rng(0), fleet, jobs, tasks,
                                int(horizon_s * 1e6)).run()
    return placement, [(t / 1e6, kind, task, machine, cpu / 1e5) for t, kind, task, machine, cpu, _
                       in placement.events.tolist()]


def test_replay_waits_for_room_then_schedules():
    placement, events = _replay([(0, 0, MACHINE_ADD, 0.5, 0.5)], [(0.3, 0.1), (0.3, 0.1)],
                                enable_s=[0, 10], final_s=[100, 50])
    assert events == [
        (0, ENABLE, 0, -1, 0.3), (0, SCHEDULE, 0, 0, 0.3), (10, ENABLE, 1, -1, 0.3),
        (100, FINISH, 0, 0, 0.3), (100, SCHEDULE, 1, 0, 0.3), (150, FINISH, 1, 0, 0.3)]
    assert placement.final_end_us.tolist() == [100_000_000, 150_000_000]


def test_replay_machine_removal_evicts_and_resubmits_remaining_work():
    machine_events = [(0, 0, MACHINE_ADD, 0.5, 0.5), (20, 1, MACHINE_ADD, 0.5, 0.5),
                      (30, 0, MACHINE_REMOVE, 0.5, 0.5)]
    placement, events = _replay(machine_events, [(0.2, 0.2)], enable_s=[0], final_s=[100])
    assert events == [
        (0, ENABLE, 0, -1, 0.2), (0, SCHEDULE, 0, 0, 0.2), (30, EVICT, 0, 0, 0.2),
        (35, SUBMIT, 0, -1, 0.2), (35, ENABLE, 0, -1, 0.2), (35, SCHEDULE, 0, 1, 0.2),
        (105, FINISH, 0, 1, 0.2)]
    assert placement.run_machine.tolist() == [0, 1]
    assert placement.run_end_type.tolist() == [EVICT, FINISH]


def test_replay_update_running_is_cut_to_free_room():
    placement, events = _replay([(0, 0, MACHINE_ADD, 0.5, 0.5)], [(0.2, 0.1), (0.2, 0.1)],
                                enable_s=[0, 0], final_s=[100, 500], update=(0, 0.5, 0.4, 0.1))
    assert (50, UPDATE_RUNNING, 0, 0, pytest.approx(0.3)) in events
    assert (100, FINISH, 0, 0, pytest.approx(0.3)) in events
    assert placement.update_us[0] == 50_000_000 and placement.update_cpu[0] == 30_000


def test_machine_events(trace):
    machines = trace["machine_events"]
    first = machines.groupby("machine_id").first()
    assert len(first) == 20
    assert (first.time == 0).all() and (first.type == MACHINE_ADD).all()
    assert machines["capacity.cpus"].between(0, 1, inclusive="right").all()
    assert machines["capacity.memory"].between(0, 1, inclusive="right").all()
    assert machines.missing_data_reason.isna().all()
    assert machines.platform_id.nunique() > 1
    # A machine is down from each REMOVE to its next ADD; nothing runs on it meanwhile.
    runs = trace["runs"]
    for machine_id, events in machines.groupby("machine_id"):
        events = events.sort_values("time", kind="stable")
        for remove_time in events.time[events.type == MACHINE_REMOVE]:
            later = events[events.time > remove_time]
            back = (later.time[later.type == MACHINE_ADD].min() if len(later)
                    else trace["horizon_us"])
            on_machine = runs[runs.machine_id == machine_id]
            assert not on_machine.start.between(remove_time, back, inclusive="left").any()
            assert not ((on_machine.start < remove_time)
                        & (on_machine.end.fillna(np.inf) > remove_time)).any()


def test_lifetimes_are_heavy_tailed(trace):
    runs, horizon_us = trace["runs"], trace["horizon_us"]
    finished = runs[runs.end.notna() & (runs.start > 0)]
    lifetime_us = finished.end - finished.start
    assert (lifetime_us < HOUR_US).mean() > 0.7
    # Most core-hours are in runs observed for over a day (a lower bound on the true share).
    observed_us = runs.end.fillna(horizon_us) - runs.start
    core_hours = observed_us * runs["resource_request.cpus"]
    assert core_hours[observed_us > DAY_US].sum() / core_hours.sum() > 0.5
    # Some tasks were running before the trace started, some are still running at its end.
    assert (runs.start == 0).sum() > 10
    assert runs.end.isna().sum() > 10


def test_lifetimes_depend_on_collection_features_but_not_only(trace):
    runs = trace["runs"]
    finished = runs[runs.end.notna() & (runs.start > 0) & (runs.end_type != EVICT)]
    names = trace["collection_events"].drop_duplicates("collection_id").set_index("collection_id")
    log_lifetime = np.log10(finished.end - finished.start)
    name = finished.collection_id.map(names.collection_logical_name)
    between = (log_lifetime.groupby(name).transform("mean") - log_lifetime.mean()).pow(2).mean()
    share = between / log_lifetime.var(ddof=0)
    assert 0.25 < share < 0.9
    production = finished.priority >= 120
    assert log_lifetime[production].median() > log_lifetime[~production].median() + 1


def test_collections_have_indexed_tasks_with_one_request(trace):
    events = trace["instance_events"]
    submits = events[(events.type == SUBMIT)].drop_duplicates(["collection_id", "instance_index"])
    per_job = submits.groupby("collection_id")
    in_trace = per_job.time.min() > 0
    indices = per_job.instance_index.agg(lambda i: sorted(i) == list(range(len(i))))
    assert indices[in_trace].all()
    assert (per_job["resource_request.cpus"].nunique() == 1).all()
    assert (per_job.size() > 1).mean() > 0.3
    collections = trace["collection_events"]
    assert set(submits.collection_id) == set(collections.collection_id[collections.type == SUBMIT])
    assert collections.priority.between(0, 450).all()
    assert collections.scheduling_class.between(0, 3).all()


def test_events_of_a_task_come_in_lifecycle_order(trace):
    events = trace["instance_events"].sort_values(
        ["collection_id", "instance_index", "time", "type"], kind="stable")
    first = events.groupby(["collection_id", "instance_index"]).type.first()
    assert (first == SUBMIT).all()
    scheduled = events[events.type.isin([SCHEDULE, UPDATE_RUNNING] + TERMINAL)]
    assert (scheduled.machine_id > 0).all()
    assert (events.machine_id[events.type.isin([SUBMIT, ENABLE])] == 0).all()
    repeated = events.duplicated(["collection_id", "instance_index"])
    assert (events.time.diff().fillna(0)[repeated] >= 0).all()
    assert (events.type == UPDATE_RUNNING).sum() > 0


def test_usage_windows_lie_in_their_runs_on_their_machines(trace):
    usage, runs = trace["instance_usage"], trace["runs"]
    window_us = 300 * 10**6
    assert (usage.start_time < usage.end_time).all()
    assert (usage.end_time - usage.start_time <= window_us).all()
    assert (usage.start_time // window_us == (usage.end_time - 1) // window_us).all()
    keys = ["collection_id", "instance_index"]
    joined = pd.merge_asof(
        usage.sort_values("start_time"),
        runs[keys + ["start", "end", "machine_id"]].rename(columns={"machine_id": "run_machine"})
        .sort_values("start"), left_on="start_time", right_on="start", by=keys)
    assert joined.start.notna().all()
    assert (joined.machine_id == joined.run_machine).all()
    assert (joined.end_time <= joined.end.fillna(trace["horizon_us"])).all()


def test_usage_distributions_are_consistent(trace):
    usage = trace["instance_usage"]
    distribution = np.stack(usage.cpu_usage_distribution.to_numpy())
    tail = np.stack(usage.tail_cpu_usage_distribution.to_numpy())
    assert distribution.shape[1] == 11 and tail.shape[1] == 9
    assert (np.diff(distribution, axis=1) >= 0).all()
    assert (np.diff(tail, axis=1) >= 0).all()
    assert (tail[:, 0] >= distribution[:, 9]).all() and (tail[:, -1] <= distribution[:, 10]).all()
    assert (distribution[:, 10] == usage["maximum_usage.cpus"]).all()
    average = usage["average_usage.cpus"].to_numpy()
    assert ((distribution[:, 0] <= average) & (average <= distribution[:, 10])).all()
    sample = usage["random_sample_usage.cpus"].to_numpy()
    assert ((distribution[:, 0] <= sample) & (sample <= distribution[:, 10])).all()
    assert (usage["maximum_usage.memory"] >= usage["average_usage.memory"]).all()
    assert (usage["maximum_usage.memory"] <= usage.assigned_memory).all()


def test_usage_mostly_below_the_request_in_force(trace):
    usage, events = trace["instance_usage"], trace["instance_events"]
    keys = ["collection_id", "instance_index"]
    in_force = pd.merge_asof(
        usage.sort_values("start_time"),
        events[keys + ["time", "resource_request.cpus", "resource_request.memory"]]
        .sort_values("time"),
        left_on="start_time", right_on="time", by=keys)
    # assigned_memory is exactly the memory request in force (after UPDATE_RUNNING too).
    assert (in_force.assigned_memory == in_force["resource_request.memory"]).all()
    above = in_force["average_usage.cpus"] > in_force["resource_request.cpus"]
    assert 0 < above.mean() < 0.02
    assert (in_force["average_usage.cpus"] / in_force["resource_request.cpus"]).mean() < 0.6


def test_requests_never_exceed_machine_capacity(trace):
    events = trace["instance_events"].sort_values(
        ["collection_id", "instance_index", "time", "type"], kind="stable")
    held = events[events.type.isin([SCHEDULE, UPDATE_RUNNING] + TERMINAL)].copy()
    keys = ["collection_id", "instance_index"]
    for resource in ("cpus", "memory"):
        request = held[f"resource_request.{resource}"]
        previous = request.groupby([held.collection_id, held.instance_index]).shift(1).fillna(0)
        held[resource] = np.select([held.type == SCHEDULE, held.type == UPDATE_RUNNING],
                                   [request, request - previous], -request)
    per_time = (held.groupby(["machine_id", "time"])[["cpus", "memory"]].sum()
                .groupby(level=0).cumsum())
    capacity = trace["machine_events"].rename(columns={"time": "from"})
    capacity = capacity[capacity.type != MACHINE_REMOVE].sort_values("from")
    used = pd.merge_asof(per_time.reset_index().sort_values("time"), capacity, left_on="time",
                         right_on="from", by="machine_id")
    assert (used.cpus <= used["capacity.cpus"] + 1e-9).all()
    assert (used.memory <= used["capacity.memory"] + 1e-9).all()
    assert used.cpus.max() > 0.5 * used["capacity.cpus"].max()
    assert len(held.groupby(keys)) > 100


def test_tasks_of_a_job_have_correlated_usage(trace):
    usage = trace["instance_usage"]
    usage = usage[usage.end_time - usage.start_time == 300 * 10**6]
    log_cpu = np.log(usage["average_usage.cpus"])
    deviation = log_cpu - log_cpu.groupby([usage.collection_id, usage.instance_index]) \
        .transform("mean")
    usage = usage.assign(deviation=deviation) \
        .sort_values(["start_time", "collection_id", "instance_index"])
    same_job = usage.groupby(["start_time", "collection_id"]).deviation.shift(-1)
    first_of_job = usage.drop_duplicates(["start_time", "collection_id"])
    other_job = first_of_job.groupby("start_time").deviation.shift(-1)

    def correlation(a, b):
        both = b.notna()
        return np.corrcoef(a[both], b[both])[0, 1]

    assert (correlation(usage.deviation, same_job)
            > correlation(first_of_job.deviation, other_job) + 0.2)


def test_usage_follows_a_daily_cycle(trace):
    usage = trace["instance_usage"]
    window_us = 300 * 10**6
    cpu_time = usage["average_usage.cpus"] * (usage.end_time - usage.start_time)
    total = cpu_time.groupby(usage.start_time // window_us).sum()
    hour = (total.index * window_us // HOUR_US) % 24
    assert total[(hour >= 12) & (hour < 18)].mean() > 1.15 * total[hour < 6].mean()


def test_usage_model_rows_do_not_depend_on_slicing():
    trace = synthetic.sample_trace(machines=3, days=0.25, seed=5)
    model = trace.usage_model()
    n_grid = trace.horizon_us // (300 * 10**6)
    whole, n_rows = model.columns(0, n_grid)
    assert n_rows == model.n_windows > 0
    sliced = [model.columns(k, min(k + 7, n_grid))[0] for k in range(0, n_grid, 7)]
    for i, column in enumerate(whole):
        np.testing.assert_array_equal(column.values, np.concatenate([s[i].values for s in sliced]))


@pytest.mark.parametrize("arguments, message", [
    ({"machines": 0}, "machines"), ({"days": -1.0}, "days"), ({"shards": 0}, "shards"),
    ({"arrival_rate_per_machine_hour": 0.0}, "arrival_rate_per_machine_hour"),
    ({"file_format": "avro"}, "file_format"), ({"layout": "flat"}, "layout"),
    ({"processes": 0}, "processes"), ({"request_scale": 0.0}, "request_scale")])
def test_generate_rejects_bad_arguments(tmp_path, arguments, message):
    with pytest.raises(ValueError, match=message):
        generate(str(tmp_path), **arguments)
