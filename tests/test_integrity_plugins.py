"""Plug-ins are not trusted blindly: what a placement policy's `select` or a peak predictor's
`predict` returns is checked where the run uses it, and a bad value fails the run in one line
naming the plug-in, its class path and the value; a plug-in that calls sys.exit() is a config
error. Each case runs `fleetcast` on a config as a user does, with the plug-ins in a package
outside the repository."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from configs.registry import PluginFailed
from configs.units import US_PER_S
from policies.lars import Lars
from policies.policy import CheckedPolicy, PlacementPolicy
from policies.replay.lifetime_source import OracleLifetimes
from policies.replay.pool import PoolSpec, PoolState
from policies.replay.simulator import PlacementTrace, simulate
from tests.helpers import docs_block, read_table

FLEETCAST = str(pathlib.Path(sys.executable).parent / "fleetcast")

FIT = "import sys\n\nimport numpy as np\n" + docs_block("WorstFit") + '''

class Fixed(PlacementPolicy):
    """Answers `answer` (a JSON literal) for every VM."""

    def __init__(self, answer):
        self.answer = answer

    def bind(self, pool, schedule_timer, now_us):
        pass

    def select(self, vm, demand, exit_us, now_us):
        return self.answer

    def update(self, host, now_us):
        pass


class NumpyWorstFit(WorstFit):
    """WorstFit answering numpy integers."""

    def select(self, vm, demand, exit_us, now_us):
        return np.int64(super().select(vm, demand, exit_us, now_us))


class ExitsWhenBuilt(Fixed):
    def __init__(self, answer=0):
        sys.exit(0)


class FailsToIndex(WorstFit):
    """WorstFit whose index update fails once VMs are placed."""

    def update(self, host, now_us):
        raise KeyError(host)


class Duck:
    """Every method of a policy, but not a PlacementPolicy (no one_shot, exits_changed)."""

    def bind(self, pool, schedule_timer, now_us):
        pass

    def select(self, vm, demand, exit_us, now_us):
        return -1

    def update(self, host, now_us):
        pass

    placed = removed = on_timer = None
'''

PEAKS = '''
import numpy as np

from predictors.peak.peak_predictor import PeakPredictor


class Returns(PeakPredictor):
    """Returns a bad (or NaN) prediction of the kind `kind`."""

    def __init__(self, kind: str):
        self.kind = kind

    def predict(self, samples):
        steps = samples.num_steps
        if self.kind == "raise":
            raise RuntimeError("model not fitted")
        peaks = {"nan": np.full(steps, np.nan), "short": np.zeros(steps - 1), "scalar": 0.5,
                 "string": "lots", "inf": np.zeros(steps), "negative": np.ones(steps)}
        peaks = peaks[self.kind]
        if self.kind == "inf":
            peaks[3] = np.inf
        if self.kind == "negative":
            peaks[5] = -0.25
        return peaks
'''


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory):
    """A folder outside the repository holding the package bad_pkg."""
    root = tmp_path_factory.mktemp("outside")
    package = root / "bad_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "fit.py").write_text(FIT)
    (package / "peaks.py").write_text(PEAKS)
    (package / "exits.py").write_text("import sys\nsys.exit(0)\n")
    return root


def fleetcast(tmp_path, plugin_path, command, text):
    """`fleetcast COMMAND config` with `text` as the config, the plug-ins on PYTHONPATH."""
    (tmp_path / "mine.textproto").write_text(text)
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(plugin_path), os.environ.get("PYTHONPATH", "")])}
    args = ["run", "mine.textproto", "--output_dir", "out", "-q"] if command == "run" \
        else [command, "mine.textproto"]
    return subprocess.run([FLEETCAST, *args], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=600)


def last_line(result) -> str:
    return result.stderr.strip().splitlines()[-1]


PLACEMENT = """
synthetic { machines: 4 days: 1 seed: 2 }
placement {
  policy: BEST_FIT
  %s
  lifetime_source { oracle: true }
  warmup_s: 7200
  sample_period_s: 900
  stranding_every: 0
}
"""


def fixed_policy(answer: str) -> str:
    return (PLACEMENT % "policy_plugin { name: 'fixed' class_path: 'bad_pkg.fit:Fixed' "
            "params { key: 'answer' value: '%s' } }" % answer)


POLICY = ("fleetcast: run failed: placement policy plug-in 'fixed' (bad_pkg.fit:Fixed) on "
          "pool 'cell': ")
NOT_AN_INDEX = "which is not a host index (an integer; -1 when no host fits)"


@pytest.mark.slow
@pytest.mark.parametrize("answer, problem", [
    # Host 0 for every VM overpacks host 0.
    ("0", "select returned host 0 for VM 3, which has no room for it (cpu 0.05517 free of "
          "0.08057 needed)"),
    ("999", "select returned host 999 for VM 0, which is not a host of the pool (hosts 0 "
            "to 3; -1 when no host fits)"),
    ("-2", "select returned host -2 for VM 0, which is not a host of the pool (hosts 0 "
           "to 3; -1 when no host fits)"),
    ("0.5", f"select returned 0.5 (float) for VM 0, {NOT_AN_INDEX}"),
    ("null", f"select returned None (NoneType) for VM 0, {NOT_AN_INDEX}"),
    ('"three"', f"select returned 'three' (str) for VM 0, {NOT_AN_INDEX}"),
    ("true", f"select returned True (bool) for VM 0, {NOT_AN_INDEX}"),
], ids=["overpacked", "999", "-2", "0.5", "None", "str", "bool"])
def test_a_bad_host_from_select_fails_the_run_naming_the_plugin(
        answer, problem, plugin_path, tmp_path):
    result = fleetcast(tmp_path, plugin_path, "run", fixed_policy(answer))
    assert result.returncode == 1, result.stderr[-3000:]
    assert last_line(result) == POLICY + problem
    assert not (tmp_path / "out" / "placement_summary").exists()


@pytest.mark.slow
def test_no_host_fits_is_minus_one_and_numpy_integers_are_hosts(plugin_path, tmp_path):
    plugins = ("policy_plugin { name: 'never' class_path: 'bad_pkg.fit:Fixed' params { key: "
               "'answer' value: '-1' } } policy_plugin { name: 'worst_fit' class_path: "
               "'bad_pkg.fit:WorstFit' } policy_plugin { name: 'numpy_worst_fit' class_path: "
               "'bad_pkg.fit:NumpyWorstFit' }")
    result = fleetcast(tmp_path, plugin_path, "run", PLACEMENT % plugins)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_table(tmp_path / "out" / "placement_summary").set_index("policy")
    assert summary.loc["never", "placed_vms"] == summary.loc["never", "warmup_vms"]
    assert summary.loc["never", "failed_vms"] > 0
    columns = ["placed_vms", "failed_vms", "empty_hosts_pct", "packing_density_pct"]
    assert summary.loc["numpy_worst_fit", columns].tolist() \
        == summary.loc["worst_fit", columns].tolist()


@pytest.mark.slow
def test_a_failing_callback_of_a_policy_fails_the_run_naming_it(plugin_path, tmp_path):
    plugin = "policy_plugin { name: 'fails' class_path: 'bad_pkg.fit:FailsToIndex' }"
    result = fleetcast(tmp_path, plugin_path, "run", PLACEMENT % plugin)
    assert result.returncode == 1, result.stderr[-3000:]
    assert last_line(result) == (
        "fleetcast: run failed: placement policy plug-in 'fails' (bad_pkg.fit:FailsToIndex) "
        "on pool 'cell': placed(0, 1, 0) raised KeyError: 1")


@pytest.mark.slow
def test_a_policy_that_is_not_a_placement_policy_is_a_config_error(plugin_path, tmp_path):
    plugin = "policy_plugin { name: 'duck' class_path: 'bad_pkg.fit:Duck' }"
    for command in ("validate", "run"):
        result = fleetcast(tmp_path, plugin_path, command, PLACEMENT % plugin)
        assert result.returncode == 2, result.stderr[-3000:]
        assert "placement.policy_plugin[0].class_path: bad_pkg.fit:Duck is not a subclass of " \
            "policies.policy.PlacementPolicy" in result.stderr


OVERCOMMIT = """
synthetic { machines: 4 days: 1 seed: 2 }
overcommit {
  metric { cpu_percentile: 90 }
  fortune_teller { name: "oracle" oracle { horizon_s: 7200 } }
  fortune_teller { name: "mine" predictor { %s } }
}
"""


def returns(kind: str) -> str:
    return (f"plugin {{ class_path: 'bad_pkg.peaks:Returns' params {{ key: 'kind' "
            f"value: '{kind}' }} }}")


TELLER = ("fleetcast: run failed: fortune teller 'mine' on machine 113288046: peak predictor "
          "plug-in bad_pkg.peaks:Returns: predict ")


@pytest.mark.slow
@pytest.mark.parametrize("kind, problem", [
    ("short", "returned 287 values for a machine of 288 steps (one peak per step)"),
    ("scalar", "returned 0.5 (float), not a numpy array of 288 peaks (one per step)"),
    ("string", "returned 'lots' (str), not a numpy array of 288 peaks (one per step)"),
    ("inf", "returned inf at step 3 of 288 (time 900000000 µs): a peak is finite and >= 0, "
            "or NaN where nothing is advertised"),
    ("negative", "returned -0.25 at step 5 of 288 (time 1500000000 µs): a peak is finite and "
                 ">= 0, or NaN where nothing is advertised"),
    ("raise", "raised RuntimeError: model not fitted"),
], ids=["short", "scalar", "string", "inf", "negative", "raise"])
def test_a_bad_prediction_fails_the_run_naming_the_teller(kind, problem, plugin_path,
                                                          tmp_path):
    result = fleetcast(tmp_path, plugin_path, "run", OVERCOMMIT % returns(kind))
    assert result.returncode == 1, result.stderr[-3000:]
    assert last_line(result) == TELLER + problem
    assert not (tmp_path / "out" / "overcommit_summary").exists()


@pytest.mark.slow
def test_a_plugin_inside_a_decorator_is_checked_too(plugin_path, tmp_path):
    inner = "max_of { predictors { %s } predictors { borg_default { phi: 0.5 } } }"
    result = fleetcast(tmp_path, plugin_path, "run", OVERCOMMIT % (inner % returns("short")))
    assert result.returncode == 1, result.stderr[-3000:]
    assert last_line(result) == TELLER + "returned 287 values for a machine of 288 steps " \
                                         "(one peak per step)"


@pytest.mark.slow
def test_nan_everywhere_advertises_nothing_and_scores_nothing(plugin_path, tmp_path):
    result = fleetcast(tmp_path, plugin_path, "run", OVERCOMMIT % returns("nan"))
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / "out"
    series = read_table(out / "overcommit_timeseries")
    assert series[series.predictor == "mine"].predicted_peak.isna().all()
    machines = read_table(out / "overcommit_machine_metrics").set_index("predictor")
    assert (machines.loc["mine", "scored_steps"] == 0).all()
    assert machines.loc["mine", "savings_ratio"].isna().all()
    assert set(read_table(out / "overcommit_cell_metrics").predictor) == {"oracle"}
    summary = read_table(out / "overcommit_summary").set_index(["predictor", "metric"])
    mine = summary.loc["mine"]
    assert mine.index.tolist() == ["violation_rate", "violation_severity", "savings_ratio",
                                   "cell_savings_ratio"]
    assert (mine.n == 0).all() and mine["mean"].isna().all() and mine.p50.isna().all()
    assert summary.loc[("oracle", "cell_savings_ratio"), "n"] > 0
    assert np.isfinite(summary.loc[("oracle", "savings_ratio"), "mean"])


EXITS_ON_IMPORT = ("placement.policy_plugin[0].class_path: importing 'bad_pkg.exits' called "
                   "sys.exit(0)")


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_plugin_module_calling_sys_exit_is_a_config_error(command, plugin_path, tmp_path):
    text = (PLACEMENT % "policy_plugin { name: 'fixed' class_path: 'bad_pkg.exits:Fixed' }")
    result = fleetcast(tmp_path, plugin_path, command, text)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [f"fleetcast: mine.textproto: {EXITS_ON_IMPORT}"]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_constructor_calling_sys_exit_is_a_config_error(plugin_path, tmp_path):
    text = (PLACEMENT % "policy_plugin { name: 'fixed' class_path: "
                        "'bad_pkg.fit:ExitsWhenBuilt' }")
    result = fleetcast(tmp_path, plugin_path, "validate", text)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        "fleetcast: mine.textproto: placement.policy_plugin[0].class_path: ExitsWhenBuilt() "
        "called sys.exit(0)"]


# --- The check itself, in process ------------------------------------------------------------

def _worst_fit():
    namespace = {}
    exec(docs_block("WorstFit"), namespace)  # pylint: disable=exec-used
    return namespace["WorstFit"](used_first=True)


def test_checking_select_changes_no_decision_with_lars():
    rng = np.random.default_rng(0)
    arrival_us = np.sort(rng.integers(0, 3 * 86400 * US_PER_S, 400))
    trace = PlacementTrace(arrival_us, arrival_us + rng.integers(60, 86400, 400) * US_PER_S,
                           rng.choice([0.1, 0.2, 0.3], size=(400, 2)))

    def replay(policy):
        lars = Lars(10.0, lifetime_order=True, max_inflight=4, migration_duration_s=60,
                    max_draining_hosts=2, check_period_s=3600, seed=1)
        return simulate(trace, PoolSpec.from_shape([1.0, 1.0], 20), policy,
                        OracleLifetimes(trace.lifetime_s()), warmup_s=3600, lars=lars)

    plain, checked = replay(_worst_fit()), replay(CheckedPolicy(_worst_fit(), "worst_fit"))
    np.testing.assert_array_equal(checked.host_of_vm, plain.host_of_vm)
    assert checked.summary == plain.summary and plain.summary["lars_migrations"] > 0


class HostZero(PlacementPolicy):
    def bind(self, pool, schedule_timer, now_us):
        pass

    def select(self, vm, demand, exit_us, now_us):
        return 0


def test_a_host_being_drained_is_no_answer():
    pool = PoolState(PoolSpec.from_shape([1.0, 1.0], 3))
    policy = CheckedPolicy(HostZero(), "placement policy plug-in 'w' (m:W) on pool 'p'")
    policy.bind(pool, lambda time_us, host: None, 0)
    assert policy.select(6, (0.5, 0.5), 10, 0) == 0
    pool.available[0] = False
    with pytest.raises(PluginFailed) as error:
        policy.select(7, (0.5, 0.5), 10, 0)
    assert str(error.value) == ("placement policy plug-in 'w' (m:W) on pool 'p': select "
                                "returned host 0 for VM 7, which is being drained (not "
                                "available for new VMs)")
