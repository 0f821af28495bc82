"""Helpers shared by the test modules (fixtures are in conftest.py): running a config in
process and reading its Parquet outputs, a tiny Azure V1 trace and config, comparing tables,
random placement pools and a replay checker, a hand driver of placement policies, a small
trace whose job name sets the lifetime, and the README's code blocks. Test modules import from
here, never from each other; what benchmarks share with tests is in fleetcast_testing/."""

import contextlib
import glob
import gzip
import hashlib
import json
import math
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from configs.units import US_PER_S
from pipelines import cli, schemas
from pipelines import config as run_config
from pipelines import run as run_pipeline
from pipelines.io.manifests import STATE_DIR
from policies.replay.pool import FIT_TOLERANCE, PoolSpec, PoolState
from policies.replay.simulator import FAILED, NOT_REPLAYED, PlacementTrace

REPO = pathlib.Path(__file__).resolve().parent.parent
FLEETCAST = str(pathlib.Path(sys.executable).parent / "fleetcast")  # the command users run
# The smallest synthetic run: 2 machines over 6 hours.
SMALL = 'name: "small" synthetic { machines: 2 days: 0.25 seed: 1 }'
DEMO_CONFIG = REPO / "configs" / "demo.textproto"


def run_text_config(text: str, output_dir, beam_args=("--runner=DirectRunner",)):
    """Parses, validates and runs a text config; returns {table name: DataFrame}."""
    config = run_config.parse_config(text)
    problems = run_config.validate(config)
    assert problems == [], problems
    _, tables = run_pipeline.run(config, str(output_dir), list(beam_args))
    return {name: read_table(os.path.join(output_dir, name)) for name in tables}


def loaded_tables_text(root, rows_by_table: dict) -> str:
    """Writes each canonical table's rows ({table name: [row dicts]}) as a Parquet input under
    `root` (in_<table>/part-0.parquet) and returns the config lines that load them."""
    loads = []
    for table, rows in rows_by_table.items():
        directory = os.path.join(str(root), f"in_{table}")
        os.makedirs(directory)
        pq.write_table(pa.Table.from_pylist(rows, schema=schemas.CANONICAL[table]),
                       os.path.join(directory, "part-0.parquet"))
        loads.append(f'{table} {{ input {{ parquet: "{directory}" }} }}')
    return "\n".join(loads)


def one_instance_rows(windows, step_us=300 * 1_000_000) -> dict:
    """{"instances", "usage"} rows of one instance ("1:0", collection 1) requesting 1 CPU
    and 1 memory, one usage window of `step_us` per (avg_cpu, max_cpu, avg_memory,
    max_memory) of `windows`, from time 0."""
    instances = [{"instance_id": "1:0", "collection_id": 1, "instance_index": 0,
                  "start_time": 0, "end_time": len(windows) * step_us, "cpu_request": 1.0,
                  "memory_request": 1.0, "priority": 0}]
    usage = [{"instance_id": "1:0", "machine_id": 1, "start_time": s * step_us,
              "end_time": (s + 1) * step_us, "cpu_limit": 1.0, "memory_limit": 1.0,
              "avg_cpu": avg_cpu, "max_cpu": max_cpu, "avg_memory": avg_memory,
              "max_memory": max_memory}
             for s, (avg_cpu, max_cpu, avg_memory, max_memory) in enumerate(windows)]
    return {"instances": instances, "usage": usage}


def run_on_loaded_tables(root, rows_by_table: dict, stages_text: str, name: str):
    """Writes each canonical table's rows ({table name: [row dicts]}) as a Parquet input under
    `root`, runs `stages_text` on them with the tables loaded (LoadOrWrite input) and returns
    ({table name: DataFrame}, output directory)."""
    output_dir = os.path.join(str(root), "out")
    text = f'name: "{name}"\n' + loaded_tables_text(root, rows_by_table) + "\n" + stages_text
    return run_text_config(text, output_dir), output_dir


def read_table(table_dir) -> pd.DataFrame:
    """A Parquet dataset directory written by fleetcast as one DataFrame."""
    files = sorted(glob.glob(os.path.join(table_dir, "*.parquet")))
    assert files, f"no Parquet files in {table_dir}"
    return pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True)


def sorted_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in a canonical order (runners may write rows in any order)."""
    if frame.empty:
        return frame.reset_index(drop=True)
    keys = [c for c in frame.columns
            if not frame[c].map(lambda v: isinstance(v, (list, tuple)) or hasattr(v, "shape"))
            .any()]
    return frame.sort_values(keys, na_position="first").reset_index(drop=True)


def assert_tables_equal(got: dict, expected: dict, names, **kwargs) -> None:
    """Each named table of two runs holds the same rows, in any order (`kwargs` go to
    pandas.testing.assert_frame_equal)."""
    for name in names:
        pd.testing.assert_frame_equal(sorted_frame(got[name]), sorted_frame(expected[name]),
                                      obj=name, **kwargs)


def assert_same_results(expected_dir, got_dir) -> None:
    """`scripts/compare_results.py EXPECTED GOT` finds every table and model file identical
    but for the output folder that lifetime_models.path names (each run's own)."""
    compared = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "compare_results.py"), str(expected_dir),
         str(got_dir)], capture_output=True, text=True, check=False)
    lines = compared.stdout.splitlines()
    different = [line for line in lines if not line.endswith(" identical") and line.split() != [
        "lifetime_models", "differs", "(metadata):", "only", "the", "results", "directory's",
        "own", "path"]]
    assert compared.returncode == 0 and not different and len(lines) > 10, compared.stdout


def counters_printed(stdout: str) -> dict:
    """{counter: value} of the counters block that `fleetcast run` printed."""
    section = stdout.split("Counters (Beam Metrics, namespace fleetcast):\n", 1)[1]
    return {name: int(value.replace(",", ""))
            for name, value in re.findall(r"^  (\S+)\s+([\d,]+)$", section, re.MULTILINE)}


def start_demo(output_dir, options=(), cwd=REPO) -> subprocess.Popen:
    """`fleetcast run configs/demo.textproto --output_dir OUTPUT_DIR -q OPTIONS...` started in
    `cwd` (its output captured)."""
    return subprocess.Popen([FLEETCAST, "run", str(DEMO_CONFIG), "--output_dir",
                             str(output_dir), "-q", *options], cwd=str(cwd),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen, timeout_s: float = 600) -> tuple:
    """(exit code, stdout, stderr) of a started command once it ends."""
    out, err = process.communicate(timeout=timeout_s)
    return process.returncode, out, err


def require_engine(service: str) -> dict:
    """engines.json's description once `service` (flink, spark) of scripts/engines.sh is up;
    else skips the calling test, or fails it where CI set FLEETCAST_REQUIRE_ENGINES."""
    from fleetcast_testing import engines
    why = engines.why_not_up(service)
    if why and os.environ.get("FLEETCAST_REQUIRE_ENGINES"):
        pytest.fail(why)
    if why:
        pytest.skip(why)
    return engines.description()


def write_gz_lines(path, lines) -> None:
    """A gzipped text file holding `lines`, each ended by a newline."""
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")


def require_sample(path: pathlib.Path) -> pathlib.Path:
    """`path` if that Azure sample (fleetcast_testing.azure_samples) exists; otherwise skips
    the calling test."""
    if not path.exists():
        pytest.skip(f"Azure sample not found at {path} (../shared/data)")
    return path


def write_manifest(root) -> dict:
    """Writes a successful run manifest (pipelines/io/publish.py) for the Parquet table
    directories already under `root`, as `fleetcast run` publishes one; returns it."""
    root = pathlib.Path(root)
    tables = {d.name: {"files": sorted(f"{d.name}/{f.name}" for f in d.glob("*.parquet"))}
              for d in sorted(root.iterdir()) if d.is_dir() and any(d.glob("*.parquet"))}
    for table in tables.values():
        table["rows"] = sum(pq.ParquetFile(root / f).metadata.num_rows for f in table["files"])
    manifest = {"fleetcast_manifest": 2, "success": True, "tables": tables,
                "files": {f: (root / f).stat().st_size
                          for t in tables.values() for f in t["files"]}, "outside": {}}
    (root / "fleetcast_manifest.json").write_text(json.dumps(manifest))
    return manifest


# A tiny Azure V1 trace and config for the integrity tests of publication and manifests.
READINGS = "".join(f"{300 * t},vm{v},1.0,{10 + t % 7}.0,{5 + v}.0\n"
                   for v in range(3) for t in range(40))
VMTABLE = "vm0,s,d,0,12000,50,10,40,Interactive,2,4\nvm1,s,d,0,,50,10,40,Delay-insensitive,4,8\n"
OVERCOMMIT = ('overcommit { metric { avg_cpu: true } scheduler { at_random { num_machines: 1 '
              'seed: 0 } } fortune_teller { name: "oracle" oracle { horizon_s: 3600 } } }')


def tiny_config(tmp_path, name="tiny", extra="", readings=READINGS):
    """A config of an Azure V1 trace of 2 VMs (120 readings) written under `tmp_path`, with
    `extra` config text; its path."""
    (tmp_path / "readings.csv").write_text(readings)
    (tmp_path / "vmtable.csv").write_text(VMTABLE)
    path = tmp_path / f"{name}.textproto"
    path.write_text(f'name: "{name}"\nazure_v1 {{ vmtable: "{tmp_path}/vmtable.csv" '
                    f'vm_cpu_readings: "{tmp_path}/readings.csv" }}\n{extra}')
    return path


def run_cli(config, output_dir, *args):
    """`fleetcast run CONFIG --output_dir OUTPUT_DIR -q ARGS...` in this process; its exit
    code."""
    return cli.main(["run", str(config), "--output_dir", str(output_dir), "-q", *args])


def snapshot(root):
    """{relative path: sha256} of every file under `root` but fleetcast's state dir."""
    files = {}
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d != STATE_DIR]
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as handle:
                files[os.path.relpath(path, root)] = hashlib.sha256(handle.read()).hexdigest()
    return files


def docs_block(class_name: str) -> str:
    """The ```python block of docs/extending.md that defines `class_name`, as printed."""
    text = (REPO / "docs" / "extending.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    (block,) = [b for b in blocks if f"class {class_name}(" in b]
    return block


def _sorted_rows(table: pa.Table):
    """The rows of `table` as dicts, in an order that does not depend on the row order (NaN
    sorts as a string)."""
    def key(row):
        return repr(sorted((k, "nan" if isinstance(v, float) and math.isnan(v) else v)
                           for k, v in row.items()))
    return sorted(table.to_pylist(), key=key)


def assert_same_rows(a: pa.Table, b: pa.Table):
    """`a` and `b` hold the same rows, in any order (NaN equal to NaN)."""
    assert a.num_rows == b.num_rows
    for x, y in zip(_sorted_rows(a), _sorted_rows(b)):
        assert x.keys() == y.keys()
        for name in x:
            both_nan = (isinstance(x[name], float) and isinstance(y[name], float)
                        and math.isnan(x[name]) and math.isnan(y[name]))
            assert both_nan or x[name] == y[name], (name, x, y)


# Placement replays: random pools, a checker of a replay's decisions, a hand driver of a policy.

def random_pool(seed, num_vms=300, num_hosts=8, zero_lifetime_fraction=0.0):
    """Heavy-tailed lifetimes (minutes to weeks), VMs alive before the start (negative
    arrivals), arrivals on a 1-minute grid (ties), two host sizes; optionally a fraction of
    VMs that exit at the instant they arrive."""
    rng = np.random.default_rng(seed)
    lifetime_s = np.clip(10 ** rng.normal(3.5, 1.2, num_vms), 60, 30 * 86400).round()
    arrival_s = (np.cumsum(rng.exponential(150, num_vms)) - 4 * 3600) // 60 * 60
    demand = np.column_stack([rng.choice([1.0, 2.0, 4.0, 8.0], num_vms),
                              rng.choice([1.75, 3.5, 7.0, 14.0, 28.0], num_vms)])
    if zero_lifetime_fraction:
        lifetime_s[rng.random(num_vms) < zero_lifetime_fraction] = 0
    trace = PlacementTrace((arrival_s * US_PER_S).astype(np.int64),
                           ((arrival_s + lifetime_s) * US_PER_S).astype(np.int64), demand)
    capacity = np.where(np.arange(num_hosts)[:, None] % 3 == 0, [24.0, 48.0], [16.0, 64.0])
    return trace, PoolSpec(capacity)


def assert_same_replays(python, fast):
    """Two PlacementResults (the Python and the compiled engine's) are identical: decisions,
    every timeseries column and every summary field."""
    np.testing.assert_array_equal(python.host_of_vm, fast.host_of_vm)
    assert python.timeseries.keys() == fast.timeseries.keys()
    for name, values in python.timeseries.items():
        np.testing.assert_array_equal(values, fast.timeseries[name], err_msg=name)
    assert python.summary.keys() == fast.summary.keys()
    for name, value in python.summary.items():
        np.testing.assert_equal(fast.summary[name], value, err_msg=name)


def check_replay(trace, pool, host_of_vm, start_us, end_us, fails_only_if_nothing_fits=True):
    """Replays the decisions: no host over capacity; a VM failed only if no host fit it
    (class First-Fit keeps classes apart, so it may fail VMs that fit another class)."""
    capacity = pool.capacity * (1 + FIT_TOLERANCE)
    used = np.zeros_like(pool.capacity)
    events = []
    for vm in range(len(trace)):
        arrival, exit_ = int(trace.arrival_us[vm]), int(trace.exit_us[vm])
        if arrival < start_us <= exit_ and exit_ > start_us:
            events.append((start_us, 1, vm))             # warm-up: placed at the start
        elif start_us <= arrival <= end_us:
            events.append((arrival, 1, vm))
        if host_of_vm[vm] >= 0 and exit_ <= end_us:
            events.append((exit_, 0, vm))
    for _, is_arrival, vm in sorted(events):
        host, demand = host_of_vm[vm], trace.demand[vm]
        if not is_arrival:
            used[host] -= demand
        elif host == FAILED:
            fits_somewhere = np.any(np.all(used + demand <= capacity, axis=1))
            assert not (fails_only_if_nothing_fits and fits_somewhere), f"VM {vm} fit"
        else:
            assert host != NOT_REPLAYED
            used[host] += demand
            assert np.all(used[host] <= capacity[host]), f"host {host} over capacity"
    return used


class Driver:
    """Places and removes VMs on a pool of (10 CPU, 10 memory) hosts by hand."""

    def __init__(self, policy, num_hosts=3, capacity=(10.0, 10.0)):
        self.pool = PoolState(PoolSpec.from_shape(capacity, num_hosts))
        self.policy = policy
        self.timers = []
        self.demand = {}
        policy.bind(self.pool, lambda time_us, host: self.timers.append((time_us, host)), 0)

    def arrive(self, vm, demand, exit_us, now_us=0):
        host = self.policy.select(vm, demand, exit_us, now_us)
        if host >= 0:
            self.demand[vm] = demand
            self.pool.place(vm, host, demand, exit_us)
            self.policy.placed(vm, host, now_us)
        return host

    def leave(self, vm, now_us=0):
        host = self.pool.remove(vm, self.demand.pop(vm))
        self.policy.removed(vm, host, now_us)
        return host


# A small trace whose job name sets the lifetime, and lifetime stage options that learn it fast
# (the model lifetime sources' and the model publication's tests).
JOB_LIFETIME_DAYS = 1.5
JOB_LIFETIME_LA_THRESHOLD_S = 3600

JOB_LIFETIME_STAGE_TEXT = f"""
  lifetime_cap_s: 21600 train_fraction: 0.5 num_trees: 20 learning_rate: 0.3
  early_stopping_rounds: 0 min_data_in_leaf: 10 uptime_max_bin: 16
  long_lived_threshold_s: 3600 long_lived_decision_s: 3600
  la_threshold_s: {JOB_LIFETIME_LA_THRESHOLD_S}
  la_target_recall: 0 train_kaplan_meier: false train_no_uptime_ablation: false
  num_uptime_quantiles: 4 num_shards: 2 train_lava_class_classifiers: true
"""


def job_lifetime_instances(num_vms=500, seed=0):
    """One pool over 1.5 days whose job name sets the lifetime: log10 lifetime (s) =
    2.3 + 0.5 · job + N(0, 0.2), job 0..5 (3 minutes to 2 days); still running at the end:
    censored."""
    rng = np.random.default_rng(seed)
    job = rng.integers(0, 6, num_vms)
    start_s = np.sort(rng.uniform(60, JOB_LIFETIME_DAYS * 86400, num_vms))
    end_s = start_s + 10 ** (2.3 + 0.5 * job + rng.normal(0, 0.2, num_vms))
    shape = rng.integers(0, 3, num_vms)
    rows = []
    for i in range(num_vms):
        censored = end_s[i] > JOB_LIFETIME_DAYS * 86400
        rows.append({
            "instance_id": f"vm{i:04d}", "pool": "cell", "start_time": int(start_s[i] * US_PER_S),
            "end_time": None if censored else int(end_s[i] * US_PER_S),
            "end_type": None if censored else "FINISH",
            "cpu_request": [0.05, 0.1, 0.2][shape[i]],
            "memory_request": [0.05, 0.1, 0.15][shape[i]],
            "collection_logical_name": f"job{job[i]}"})
    return rows


JOB_LIFETIME_MACHINES = [{"machine_id": m, "time": 0, "cpu_capacity": 1.0, "memory_capacity": 1.0,
                         "pool": "cell"} for m in range(5)]


def boundary_uptimes_s(thresholds: np.ndarray) -> np.ndarray:
    """0 and the uptimes at, just below and just above each threshold."""
    edges = np.power(10.0, thresholds) - 1.0
    special = np.concatenate([[0.0], edges, np.nextafter(edges, np.inf),
                              np.nextafter(edges, -np.inf)])
    return special[special >= 0]


CHROMEDRIVER = shutil.which("chromedriver")
needs_chromium = pytest.mark.skipif(
    CHROMEDRIVER is None,
    reason="no chromedriver: apt-get install -y chromium chromium-driver "
           "(scripts/setup_venv.sh does)")


@contextlib.contextmanager
def headless_chromium():
    """A selenium driver of Debian's Chromium, headless, 1300 x 1000; quit on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1300,1000"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
