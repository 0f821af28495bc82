"""Test-session setup that must happen before numpy is first imported.

OpenBLAS's thread pool makes the small matrix operations of the overcommit forecasters (the
GP's Cholesky factorizations, statsmodels' ARIMA fits) about 10x slower on a shared 2-core
machine, and it is inherited by the notebook kernels the tests start; one thread per process
is what the pipelines' workers run anyway (a process per core).

Below that setup, the fixtures shared by test modules: the real Azure V1 samples in
../shared/data (fleetcast_testing/azure_samples.py), and a small fitted lifetime model. Plain
helpers and constants are in tests/helpers.py. `direct_demo` is the DirectRunner's demo that
the Flink and Spark runs must equal.
"""

import fcntl
import os
import subprocess

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from configs.units import US_PER_S  # noqa: E402
from fleetcast_testing.azure_samples import (  # noqa: E402
    AZURE_READINGS,
    AZURE_VMTABLE,
    load_azure_instances,
)
from pipelines.io.manifests import MANIFEST  # noqa: E402
from predictors.lifetime.examples import make_uptime_examples  # noqa: E402
from predictors.lifetime.uptime_model import UptimeLifetimeModel  # noqa: E402
from tests.helpers import DEMO_CONFIG, FLEETCAST, counters_printed, require_sample  # noqa: E402


@pytest.fixture(scope="session")
def azure_vmtable():
    """Path of the real Azure V1 vmtable sample (259,159 VMs); skips the test if absent."""
    return require_sample(AZURE_VMTABLE)


@pytest.fixture(scope="session")
def azure_readings():
    """Path of the real Azure V1 CPU readings sample (50 VMs x 8004 readings); skips the test
    if absent."""
    return require_sample(AZURE_READINGS)


@pytest.fixture(scope="module")
def azure_instances(azure_vmtable):
    """The vmtable sample as canonical instances (a DataFrame; do not modify it)."""
    return load_azure_instances(azure_vmtable)


@pytest.fixture(scope="module")
def small_model():
    """(an UptimeLifetimeModel fitted on 1,200 instances whose job sets the lifetime over five
    days, those instances' encoded features)."""
    rng = np.random.default_rng(7)
    n = 1200
    job = rng.integers(0, 8, n)
    start = np.sort(rng.uniform(0, 5 * 86400, n))
    frame = pd.DataFrame({
        "instance_id": [f"i{k}" for k in range(n)],
        "start_time": (start * US_PER_S).astype(np.int64),
        "end_time": ((start + 10 ** (2 + 0.4 * job + rng.normal(0, 0.2, n))) * US_PER_S
                     ).astype(np.int64),
        "collection_logical_name": [f"job{j}" for j in job],
        "cpu_request": rng.choice([0.5, 1.0], n)})
    examples, _ = make_uptime_examples(frame)
    model = UptimeLifetimeModel(num_trees=30, num_leaves=16, learning_rate=0.3,
                                early_stopping_rounds=0, uptime_max_bin=32, num_threads=1,
                                features=["collection_logical_name", "cpu_request"]).fit(
        examples)
    return model, model.encode(frame)


@pytest.fixture(scope="session")
def direct_demo(tmp_path_factory):
    """The results directory of `fleetcast run configs/demo.textproto` on the DirectRunner:
    what every runner's demo must equal. Run once per test session, however many pytest-xdist
    workers ask (the first holds a lock while it runs; the others wait and reuse it)."""
    shared = tmp_path_factory.getbasetemp().parent  # one per session, shared by workers
    results = shared / "direct_demo"
    with open(shared / "direct_demo.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (results / MANIFEST).exists():
            done = subprocess.run(
                [FLEETCAST, "run", str(DEMO_CONFIG), "--output_dir", str(results), "-q"],
                capture_output=True, text=True, check=False)
            assert done.returncode == 0, done.stderr[-3000:]
            (shared / "direct_demo.stdout").write_text(done.stdout)
    return results


@pytest.fixture(scope="session")
def direct_demo_counters(direct_demo):
    """The counters that the DirectRunner's demo printed."""
    return counters_printed((direct_demo.parent / "direct_demo.stdout").read_text())
