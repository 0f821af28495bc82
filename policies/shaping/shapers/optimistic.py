"""Optimistic preemption ([Pace18] §III-B, after Omega [5] and [4]): running components are
resized to forecast + beta and nothing is preempted proactively. Resources are redeemed
without managing the consequences: when a host's actual usage exceeds its capacity, the
operating system kills components there (the simulator's overload rule, see
policies/shaping/cluster/simulator.py: lowest priority first, ties in a seeded random order; a core
component's death fails its whole application); under the component failure model, a
component using more than its own allocation is killed instead."""

from policies.shaping.shapers.base import ShapingPolicy


class Optimistic(ShapingPolicy):
    """Allocation = forecast + beta (the base class's reshape), no preemption."""

    name = "optimistic"
