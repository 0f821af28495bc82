"""Overcommit-aware placement end to end: placement.admission on hand-made tables, its checks,
and the frontier config."""

import pathlib

import numpy as np
import pytest

from configs import fleetcast_pb2
from pipelines import config as run_config
from pipelines.io import spill
from pipelines.report import admission as report_admission
from pipelines.report import write_report
from pipelines.stages.placement import admission as stage_admission
from policies.best_fit import BestFit
from policies.nilas import Nilas
from policies.replay.lifetime_source import OracleLifetimes
from policies.replay.pool import PoolSpec
from policies.replay.simulator import PlacementTrace, simulate
from policies.replay.usage import VmUsage
from tests.helpers import assert_tables_equal, run_on_loaded_tables

S = 1_000_000
STEP = 300 * S
REPO = pathlib.Path(__file__).resolve().parent.parent
MACHINES = [{"machine_id": m, "time": 0, "cpu_capacity": 1.0, "memory_capacity": 1.0,
             "pool": "a"} for m in range(4)]
OVERCOMMIT = """overcommit {
  metric { avg_cpu: true }
  scheduler { by_machine_id: true }
  fortune_teller { name: "oracle" oracle { horizon_s: 3600 } }
  fortune_teller { name: "borg_default" predictor { borg_default { phi: 0.5 } } }
  fortune_teller { name: "n_sigma" predictor { n_sigma { n: 3 num_history_samples: 6
                                                        min_num_samples: 3 } } }
  fortune_teller { name: "arima" predictor { arima { } } }
}"""
PLACEMENT = """placement {
  policy: BEST_FIT policy: NILAS
  lifetime_source { oracle: true }
  admission { requests: true }
  admission { fortune_teller: "borg_default" }
  admission { fortune_teller: "n_sigma" }
  warmup_s: 3600 sample_period_s: 900 stranding_every: 0
}"""


def rows():
    """80 VMs over 8 hours on 4 machines of 1 CPU, each with 5-minute usage windows at 20-70 %
    of its request (the last window may run past its end); a few without usage."""
    rng = np.random.default_rng(5)
    start = np.sort(rng.integers(0, 8 * 3600, 80)) * S
    end = start + rng.integers(1800, 4 * 3600, 80) * S
    instances, usage = [], []
    for i in range(80):
        request = float(rng.choice([0.1, 0.2, 0.4]))
        instances.append({"instance_id": f"vm-{i:02d}", "pool": "a", "machine_id": i % 4,
                          "start_time": int(start[i]), "end_time": int(end[i]),
                          "cpu_request": request, "memory_request": 0.1})
        if i % 20 == 7:
            continue
        for window_start in range(int(start[i]), int(end[i]), STEP):
            usage.append({"instance_id": f"vm-{i:02d}", "machine_id": i % 4,
                          "start_time": window_start, "end_time": window_start + STEP,
                          "cpu_limit": request, "memory_limit": 0.1,
                          "avg_cpu": request * float(rng.uniform(0.2, 0.7))})
    return instances, usage


@pytest.fixture(scope="module")
def run_and_output(tmp_path_factory):
    instances, usage = rows()
    return run_on_loaded_tables(
        tmp_path_factory.mktemp("overcommit_placement"),
        {"instances": instances, "machines": MACHINES, "usage": usage},
        OVERCOMMIT.replace('  fortune_teller { name: "arima" predictor { arima { } } }\n', "")
        + "\n" + PLACEMENT, "overcommit_placement_test")


@pytest.fixture(scope="module")
def run(run_and_output):
    return run_and_output[0]


def test_the_usage_spilled_to_files_gives_the_same_tables(run, tmp_path, monkeypatch):
    spilled = []
    close = spill.ArrayWriter.close
    monkeypatch.setattr(spill, "MIN_SPILL_BYTES", 0)  # every table and array, however small
    monkeypatch.setattr(spill.ArrayWriter, "close",
                        lambda self: spilled.append(close(self)) or spilled[-1])
    instances, usage = rows()
    got, _ = run_on_loaded_tables(
        tmp_path, {"instances": instances, "machines": MACHINES, "usage": usage},
        OVERCOMMIT.replace('  fortune_teller { name: "arima" predictor { arima { } } }\n', "")
        + "\n" + PLACEMENT, "overcommit_placement_test")
    assert any(isinstance(value, spill.SpilledArray) for value in spilled)
    assert_tables_equal(got, run, ("placement_summary", "placement_hosts",
                                   "placement_timeseries"))


def direct_replay(policy, admission_name):
    """The replay the stage should run, built here from the rows."""
    instances, usage = rows()
    instances.sort(key=lambda r: (r["start_time"], r["instance_id"]))
    start = np.array([r["start_time"] for r in instances])
    end = np.array([r["end_time"] for r in instances], dtype=np.float64)
    demand = np.array([[r["cpu_request"], r["memory_request"]] for r in instances])
    trace = PlacementTrace.from_arrays(start, end, demand, end_us=int(end.max()))
    # Every window lies within its VM's one run.
    vm_of = {r["instance_id"]: vm for vm, r in enumerate(instances)}
    step_us = 300 * S
    vm_usage = VmUsage.from_samples([vm_of[u["instance_id"]] for u in usage],
                                    [u["start_time"] // step_us * step_us for u in usage],
                                    [u["avg_cpu"] for u in usage],
                                    [u["cpu_limit"] for u in usage], len(instances), step_us)
    overcommit = run_config.parse_config(OVERCOMMIT).overcommit
    admission = stage_admission.make_admission(admission_name, vm_usage, demand[:, 0],
                                               overcommit)
    result = simulate(trace, PoolSpec(np.ones((4, 2))), policy,
                      OracleLifetimes(trace.lifetime_s()), start_us=max(0, int(start.min())),
                      end_us=int(start.max()), warmup_s=3600, sample_period_s=900,
                      inflation_mix=None, admission=admission)
    return result, admission


def test_every_policy_has_a_row_per_admission_with_its_usage_replay(run):
    summary = run["placement_summary"]
    assert sorted(zip(summary["policy"], summary["admission"])) == sorted(
        (p, a) for p in ("best_fit", "nilas") for a in ("borg_default", "n_sigma", "requests"))
    assert (summary["admission_scored_windows"] > 0).all()
    hosts = run["placement_hosts"]
    assert len(hosts) == 6 * 4
    for (policy, admission), group in hosts.groupby(["policy", "admission"]):
        row = summary[(summary["policy"] == policy) & (summary["admission"] == admission)]
        scored = group["scored_windows"].sum()
        violations = (group["violation_rate"].fillna(0) * group["scored_windows"]).sum()
        assert row["admission_scored_windows"].item() == scored
        assert row["violation_rate_pct"].item() == pytest.approx(100 * violations / scored)
    # Each admission is compared with Best-Fit under the same admission.
    best_fit = summary[summary["policy"] == "best_fit"]
    assert (best_fit["empty_hosts_pct_vs_best_fit_pp"] == 0).all()


@pytest.mark.parametrize("policy", [BestFit, Nilas])
@pytest.mark.parametrize("admission", ["requests", "borg_default", "n_sigma"])
def test_the_stage_replays_what_a_direct_replay_of_the_rows_gives(run, policy, admission):
    result, replayed = direct_replay(policy(), admission)
    summary = run["placement_summary"]
    row = summary[(summary["policy"] == policy.name) & (summary["admission"] == admission)]
    for name in ("placements", "failed_placements", "empty_hosts_pct", "admission_windows",
                 "admission_scored_windows", "violation_rate_pct", "savings_pct",
                 "overflow_pct"):
        assert row[name].item() == pytest.approx(result.summary[name]), name
    hosts = run["placement_hosts"]
    hosts = hosts[(hosts["policy"] == policy.name) & (hosts["admission"] == admission)]
    assert hosts.sort_values("host")["windows"].tolist() == replayed.totals.windows.tolist()


def test_admitting_by_a_predicted_peak_packs_more_than_by_requests(run):
    summary = run["placement_summary"].set_index(["policy", "admission"])
    for policy in ("best_fit", "nilas"):
        requests = summary.loc[(policy, "requests")]
        borg = summary.loc[(policy, "borg_default")]
        assert requests["violation_rate_pct"] <= borg["violation_rate_pct"]
        # Half of each sampled VM's limit; a VM without usage counts at its request.
        assert requests["savings_pct"] == 0 < borg["savings_pct"] <= 50
        assert borg["packing_density_pct"] > requests["packing_density_pct"]


def problems(text):
    return [str(p) for p in run_config.validate(run_config.parse_config(text),
                                                check_inputs=False)]


SOURCE = 'synthetic { machines: 4 days: 1 }\n'


@pytest.mark.parametrize("placement, overcommit, expected", [
    ('admission { fortune_teller: "nope" }', OVERCOMMIT,
     "placement.admission[0].fortune_teller: 'nope' is no overcommit.fortune_teller"),
    ('admission { fortune_teller: "arima" }', OVERCOMMIT,
     "placement.admission[0].fortune_teller: 'arima': a arima predictor cannot admit"),
    ('admission { requests: true }', "",
     "placement.admission: needs the overcommit stage"),
    ('admission { requests: true } admission { requests: true }', OVERCOMMIT,
     "placement.admission[1]: 'requests' is listed twice"),
    ('admission { requests: false }', OVERCOMMIT,
     "placement.admission[0]: names no rule"),
    ('admission { requests: true } lars { order: LIFETIME }', OVERCOMMIT,
     "placement.admission: does not run with lars"),
    ('admission { requests: true }', OVERCOMMIT.replace(
        'fortune_teller { name: "oracle" oracle { horizon_s: 3600 } }', ""),
     "placement.admission: needs an oracle fortune teller"),
    ('admission { requests: true }', OVERCOMMIT.replace("avg_cpu: true", "avg_memory: true"),
     "overcommit.metric: must be a CPU metric"),
])
def test_a_bad_admission_is_named(placement, overcommit, expected):
    found = problems(f"{SOURCE}{overcommit}\nplacement {{ policy: BEST_FIT "
                     f"lifetime_source {{ oracle: true }} {placement} }}")
    assert any(expected in problem for problem in found), found


def test_the_frontier_config_is_valid_and_sweeps_what_it_says():
    config = run_config.load_config(str(REPO / "configs" / "overcommit_placement.textproto"))
    assert problems(open(REPO / "configs" / "overcommit_placement.textproto").read()) == []
    assert stage_admission.admission_names(config.placement) == [
        "requests", "oracle_lifetime", "borg_default", "rc_like", "n_sigma",
        "max_n_sigma_rc_like"]
    assert [fleetcast_pb2.PlacementConfig.Policy.Name(p) for p in config.placement.policy] == [
        "BEST_FIT", "NILAS", "LAVA"]


def test_the_frontier_keeps_the_points_no_other_beats_on_both():
    violation = np.array([0.0, 0.0, 5.0, 5.0, 10.0, 2.0])
    gain = np.array([1.0, 3.0, 3.0, 6.0, 6.0, 3.0])
    assert report_admission.on_frontier(violation, gain).tolist() == [
        False, True, False, True, False, False]


def test_the_report_draws_the_frontier_and_names_it_in_the_findings(run, run_and_output):
    page = write_report(run_and_output[1]).read_text(encoding="utf-8")
    assert "Overcommit-aware placement" in page
    assert "Overcommit frontier (empty hosts vs Best-Fit by requests" in page
    points = report_admission.frontier(run["placement_summary"], "a", "oracle")
    assert len(points) == 6 and points["on_frontier"].any()
    best_fit_by_requests = points[(points["admission"] == "requests")
                                  & (points["policy"] == "best_fit")]
    assert best_fit_by_requests["gain_pp"].tolist() == [0.0]
