"""Sanity replay on the real Azure V1 vmtable sample: invariants on a configured host shape."""

import numpy as np
import pytest

from fleetcast_testing.azure_samples import read_vmtable
from policies.best_fit import BestFit
from policies.la import LifetimeAlignment
from policies.lava import Lava
from policies.nilas import Nilas
from policies.replay.lifetime_source import NoisyOracleLifetimes, OracleLifetimes
from policies.replay.metrics import InflationMix
from policies.replay.pool import PoolSpec
from policies.replay.simulator import FAILED, NOT_REPLAYED, PlacementTrace, simulate
from tests.helpers import check_replay

pytestmark = pytest.mark.real_data

SAMPLE_END_S = 2_100_000.0
HOST_SHAPE = (48.0, 192.0)       # cores, GB
S = 1_000_000


@pytest.fixture(scope="module")
def first_half_day(azure_vmtable):
    """The VMs created in the sample's first 12 hours; times from the first arrival,
    censored VMs end at the sample end."""
    table = read_vmtable(azure_vmtable,
                         usecols=["vmcreated", "vmdeleted", "vmcorecount", "vmmemory"])
    start_s = table["vmcreated"].min()
    table = table[table["vmcreated"] < start_s + 43200].sort_values("vmcreated")
    trace = PlacementTrace.from_arrays(
        ((table["vmcreated"] - start_s) * S).round(),
        ((table["vmdeleted"] - start_s) * S).round(),
        table[["vmcorecount", "vmmemory"]].to_numpy(float),
        end_us=int((SAMPLE_END_S - start_s) * S))
    return trace


@pytest.mark.parametrize("make_policy", [BestFit, LifetimeAlignment, Nilas, Lava])
def test_replay_of_the_azure_sample_keeps_its_invariants(first_half_day, make_policy):
    trace = first_half_day
    pool = PoolSpec.from_peak_demand(HOST_SHAPE, trace.arrival_us, trace.exit_us,
                                     trace.demand, target_utilization=0.85)
    assert 200 < pool.num_hosts < 1000
    end_us = int(trace.arrival_us.max())
    # NILAS repredicts a noisy oracle (cached, 15 min); the others see true lifetimes.
    lifetimes = (NoisyOracleLifetimes(trace.lifetime_s(), accuracy=0.8, seed=0)
                 if make_policy is Nilas else OracleLifetimes(trace.lifetime_s()))
    result = simulate(trace, pool, make_policy(), lifetimes, warmup_s=3 * 3600,
                      sample_period_s=1800, refresh_interval_s=900,
                      inflation_mix=InflationMix.from_demand(trace.demand), stranding_every=8)
    host_of_vm = result.host_of_vm
    check_replay(trace, pool, host_of_vm, 0, end_us)
    assert np.all(host_of_vm != NOT_REPLAYED)
    assert np.mean(host_of_vm == FAILED) < 0.005
    series, summary = result.timeseries, result.summary
    assert len(series["time_us"]) == 18
    assert np.all(series["empty_hosts_pct"] <= series["upper_bound_empty_hosts_pct"])
    assert np.all((series["packing_density_pct"] > 50) & (series["packing_density_pct"] <= 100))
    for name in ("cpu", "memory"):
        stranded = series[f"stranded_{name}_pct"][::8]
        assert np.all((stranded >= 0) & (stranded <= 100 - series[f"{name}_allocated_pct"][::8]))
    assert 0 < summary["empty_hosts_pct"] < summary["upper_bound_empty_hosts_pct"]
