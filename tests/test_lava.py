"""LAVA is [Ling25ext] App. I Algorithm 3, a score: it never fails a VM that fits on some host.

The hard recycling rule of the §4.3 prose survives only as the "lava_strict_recycling"
ablation, which does fail such VMs.
"""

import numpy as np
import pytest

from configs import fleetcast_pb2
from pipelines import config as run_config
from policies.best_fit import BestFit
from policies.lava import OPEN, RECYCLING, Lava
from policies.registry import PLACEMENT_POLICIES
from policies.replay.lifetime_source import NoisyOracleLifetimes, OracleLifetimes
from policies.replay.pool import PoolSpec
from policies.replay.simulator import FAILED, simulate
from tests.helpers import Driver, check_replay, random_pool

S = 1_000_000
MIN = 60 * S
HOUR = 3600 * S
LC1, LC2, LC3, LC4 = 0, 1, 2, 3
Policy = fleetcast_pb2.PlacementConfig.Policy


def recycling_lc2_host_and_full_open_host(policy):
    """Host 0: recycling LC2 with 5 CPU free; host 1: open LC3 with 1 CPU free."""
    driver = Driver(policy, num_hosts=2)
    assert driver.arrive(0, (5.0, 1.0), 5 * HOUR) == 0        # LC2 opens host 0
    assert driver.arrive(1, (4.6, 1.0), 5 * HOUR) == 0        # 96 % CPU: recycling
    assert driver.arrive(2, (9.0, 1.0), 50 * HOUR) == 1       # LC3 opens host 1
    driver.leave(1)
    assert policy.host_state(0)[:2] == (RECYCLING, LC2)
    assert policy.host_state(1)[:2] == (OPEN, LC3)
    return driver


@pytest.mark.parametrize("exit_us, vm_class", [(5 * HOUR, LC2), (30 * MIN, LC1),
                                               (500 * HOUR, LC4)])
def test_a_vm_that_fits_only_on_a_recycling_host_is_placed_there(exit_us, vm_class):
    assert Lava.lifetime_class(exit_us) == vm_class
    # A (3, 3) VM fits host 0 alone (host 1 has 1 CPU free) and no host is empty.
    lava = recycling_lc2_host_and_full_open_host(Lava())
    assert lava.arrive(3, (3.0, 3.0), exit_us) == 0
    strict = recycling_lc2_host_and_full_open_host(Lava(strict_recycling=True))
    # The hard rule refuses a VM of the host's class or higher: with no empty host, it fails.
    assert strict.arrive(3, (3.0, 3.0), exit_us) == (0 if vm_class < LC2 else FAILED)


def test_algorithm_3_tiers_in_order():
    policy = Lava()
    driver = Driver(policy, num_hosts=5)
    driver.arrive(0, (6.0, 1.0), 5 * HOUR)                    # host 0: open LC2
    driver.arrive(1, (8.0, 1.0), 50 * HOUR)                   # host 1: open LC3
    driver.arrive(2, (8.0, 1.0), 500 * HOUR)                  # host 2: open LC4
    driver.arrive(3, (1.5, 1.0), 50 * HOUR)                   # host 1: 95 %, recycling
    driver.arrive(4, (1.8, 1.0), 500 * HOUR)                  # host 2: 98 %, recycling
    assert [policy.host_state(h)[:2] for h in range(3)] == [
        (OPEN, LC2), (RECYCLING, LC3), (RECYCLING, LC4)]
    # 1. An LC2 VM: the recycling host of the closest higher class (LC3), although the LC4
    #    one fits better and NILAS alone would take it (both outlive the VM: cost 0).
    assert driver.arrive(5, (0.2, 0.2), 5 * HOUR) == 1
    # 2. An LC2 VM that fits no recycling host: the open LC2 host.
    assert driver.arrive(6, (1.0, 1.0), 5 * HOUR) == 0
    # 3. An LC3 VM: no recycling LC4 host and no open LC3 host fit it; any used host (the
    #    open LC2 host) before an empty one.
    assert driver.arrive(7, (1.0, 1.0), 50 * HOUR) == 0
    # 4. Only an empty host fits.
    assert driver.arrive(8, (9.0, 9.0), 50 * HOUR) == 3
    assert driver.arrive(9, (9.0, 9.0), 50 * HOUR) == 4
    # 5. Nothing fits.
    assert driver.arrive(10, (9.0, 9.0), 50 * HOUR) == FAILED


def tight_pool(seed):
    """test_placement_simulator's random trace on (16, 64) hosts sized from its peak demand
    at 90 %: Best-Fit fails nothing there, the strict ablation some VMs."""
    trace, _ = random_pool(seed, num_vms=600)
    return trace, PoolSpec.from_peak_demand((16.0, 64.0), trace.arrival_us, trace.exit_us,
                                            trace.demand, 0.9)


def failed(trace, pool, policy, lifetimes, check=False):
    end_us = int(trace.exit_us.max()) + S
    host_of_vm = simulate(trace, pool, policy, lifetimes, start_us=0, end_us=end_us,
                          warmup_s=0, sample_period_s=86400).host_of_vm
    if check:
        check_replay(trace, pool, host_of_vm, 0, end_us)
    return int(np.sum(host_of_vm == FAILED))


def test_lava_fails_what_best_fit_fails_on_random_pools():
    strict_failed = 0
    for seed in range(6):
        trace, pool = tight_pool(seed)
        for lifetimes in (OracleLifetimes(trace.lifetime_s()),
                          NoisyOracleLifetimes(trace.lifetime_s(), accuracy=0.6, seed=seed)):
            best_fit = failed(trace, pool, BestFit(), lifetimes)
            # check=True: every VM LAVA fails fit on no host at that moment.
            assert failed(trace, pool, Lava(), lifetimes, check=True) == best_fit
            strict_failed += failed(trace, pool, Lava(strict_recycling=True), lifetimes)
    # The pools are tight enough that the hard rule fails VMs there.
    assert strict_failed > 0


def test_given_vm_classes_decide_the_tier_and_open_hosts_in_their_class():
    arrivals = [(0, (6.0, 1.0), 5 * HOUR), (1, (8.0, 1.0), 50 * HOUR),
                (2, (0.5, 0.5), 50 * HOUR)]
    # By their predicted exits: VM 0 opens host 0 as LC2, VM 1 host 1 as LC3, and VM 2
    # (LC3) matches the open LC3 host 1 (tier 2).
    by_exit = Lava()
    driver = Driver(by_exit, num_hosts=3)
    assert [driver.arrive(*arrival) for arrival in arrivals] == [0, 1, 1]
    assert [by_exit.host_state(h)[:2] for h in (0, 1)] == [(OPEN, LC2), (OPEN, LC3)]
    # Classed LC1, LC4 and LC1 from elsewhere, the same exits: the hosts open in the given
    # classes, and VM 2 matches the open LC1 host 0.
    given = Lava(vm_classes=[LC1, LC4, LC1])
    driver = Driver(given, num_hosts=3)
    assert [driver.arrive(*arrival) for arrival in arrivals] == [0, 1, 0]
    assert [given.host_state(h)[:2] for h in (0, 1)] == [(OPEN, LC1), (OPEN, LC4)]


def test_vm_classes_of_the_arrival_predictions_change_no_decision():
    for seed in range(3):
        trace, pool = tight_pool(seed)
        lifetimes = NoisyOracleLifetimes(trace.lifetime_s(), accuracy=0.6, seed=seed)
        at_arrival_us = np.rint(lifetimes.predict_remaining_s(
            np.arange(len(trace)), np.zeros(len(trace))) * S).astype(np.int64)
        classes = [Lava.lifetime_class(r) for r in at_arrival_us.tolist()]
        assert len(set(classes)) == 4
        end_us = int(trace.exit_us.max()) + S
        by_exit, given = (simulate(trace, pool, policy, lifetimes, start_us=0, end_us=end_us,
                                   warmup_s=0, sample_period_s=86400).host_of_vm
                          for policy in (Lava(), Lava().with_vm_classes(classes)))
        np.testing.assert_array_equal(by_exit, given)


@pytest.mark.parametrize("classes", [[0, 4], [-1, 2]])
def test_vm_classes_must_be_lava_classes(classes):
    with pytest.raises(ValueError, match="vm_classes must be class indexes 0..3"):
        Lava(vm_classes=classes)


def test_registry_names_are_the_enum_names():
    for name in PLACEMENT_POLICIES:
        assert Policy.Name(Policy.Value(name.upper())).lower() == name
    config = fleetcast_pb2.PlacementConfig()
    lava = PLACEMENT_POLICIES["lava"].build(config)
    strict = PLACEMENT_POLICIES["lava_strict_recycling"].build(config)
    assert (lava.name, lava.strict_recycling) == ("lava", False)
    assert (strict.name, strict.strict_recycling) == ("lava_strict_recycling", True)


def test_a_config_with_lava_scoring_says_what_to_use_instead():
    problems = [str(p) for p in run_config.validate(run_config.parse_config(
        "synthetic {} placement { policy: LAVA_SCORING lifetime_source { oracle: true } }"),
        check_inputs=False)]
    assert len(problems) == 1
    assert problems[0].startswith("placement.policy: LAVA_SCORING was removed")
    assert "use policy: LAVA" in problems[0] and "LAVA_STRICT_RECYCLING" in problems[0]
    with pytest.raises(ValueError, match="use policy: LAVA"):
        PLACEMENT_POLICIES["lava_scoring"].build(fleetcast_pb2.PlacementConfig())
