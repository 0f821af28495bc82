"""The shaping simulator's workload: applications, their components, per-step usage, as
flat numpy arrays (`Workload`).

An application (a trace collection / job) has components (its instances), each with a
request (cpu, memory), a runtime in steps and a usage series of that many steps, indexed by
the component's *age* (steps run since its last start): a component that restarts replays
its series from the beginning (its work is lost, [Pace18] §III-B). Several components may
share a series (a sampled workload, [Pace18] §IV-A), and forecasts are computed once per
series. Usage is clipped to the request (the baseline's container limit), so the baseline
never overloads a host.
"""

import dataclasses
from typing import Sequence

import numpy as np

from policies.shaping.random_walk_usage import random_walk_steps

CPU, MEMORY = 0, 1
# The seed of `sub_window_steps` in the shaping stage: every run sees the same usage.
SUB_WINDOW_SEED = 0


def sub_window_steps(mean: np.ndarray, maximum: np.ndarray, steps: np.ndarray,
                     rng: np.random.Generator) -> np.ndarray:
    """Per-step usage float64[sum(steps), 2] of W windows (mean, maximum float64[W, 2];
    steps int64[W] >= 1 steps each, e.g. 5 one-minute steps of a 5-minute window), window
    after window, that keeps each window's mean and maximum ([Pace18] §V monitors every
    minute; the traces give 5-minute statistics).

    Per window and resource, with k steps, mean m and maximum M (m clipped to [0, M]): one
    step, drawn uniformly, is M; the other k - 1 are b = (k m - M) / (k - 1) plus a zero-sum
    perturbation, uniform draws centred on their mean and scaled to the widest that keeps
    every step within [0, M]. Their mean is then m and their maximum M exactly (to rounding).
    Where k m < M (a peak shorter than a step) no such steps exist: the peak step is M and
    the others 0, which keeps the maximum and raises the mean to M / k. A window of one step
    is its maximum.
    """
    maximum = np.maximum(maximum, 0.0)
    mean = np.clip(mean, 0.0, maximum)
    out = np.empty((int(steps.sum()), 2))
    window_start = np.cumsum(steps) - steps
    for k in np.unique(steps):
        rows = np.flatnonzero(steps == k)
        block = np.empty((len(rows), k, 2))
        if k == 1:
            block[:, 0] = maximum[rows]
        else:
            rest = np.maximum((k * mean[rows] - maximum[rows]) / (k - 1), 0.0)  # [w, 2]
            noise = rng.uniform(-1.0, 1.0, (len(rows), k - 1, 2))
            noise -= noise.mean(axis=1, keepdims=True)
            spread = np.abs(noise).max(axis=1)
            room = np.minimum(rest, maximum[rows] - rest)
            scale = np.divide(room, spread, out=np.zeros_like(room), where=spread > 0)
            # Clipped: rounding can put a step an ulp above the maximum.
            others = np.clip(rest[:, None, :] + noise * scale[:, None, :], 0.0,
                             maximum[rows][:, None, :])
            peak = rng.integers(0, k, len(rows))
            is_peak = np.arange(k)[None, :] == peak[:, None]
            block[is_peak] = maximum[rows]
            block[~is_peak] = others.reshape(-1, 2)
        positions = window_start[rows][:, None] + np.arange(k)[None, :]
        out[positions.ravel()] = block.reshape(-1, 2)
    return out


@dataclasses.dataclass(frozen=True)
class Workload:
    """Applications and components as flat arrays (A applications, C components, N steps).

    Attributes:
      step_s: seconds per step (the usage window, 300 s for Google v3 and Azure).
      app_id: int64[A] the applications' ids in outputs (trace collection ids).
      submit_step: int64[A] submission step, ascending.
      priority: int64[A] higher is more important.
      app_start: int64[A + 1] application a's components are app_start[a]:app_start[a + 1].
      request: float64[C, 2] (cpu, memory) request, in the trace's units.
      elastic: bool[C] elastic components (False: core).
      length: int64[C] runtime in steps (>= 1).
      offset: int64[C] start of the component's series in `usage`.
      usage: float64[N, 2] per-step (cpu, memory) usage, clipped to the request.
      clipped_steps: values above the request that were clipped when the workload was built.
    """

    step_s: float
    app_id: np.ndarray
    submit_step: np.ndarray
    priority: np.ndarray
    app_start: np.ndarray
    request: np.ndarray
    elastic: np.ndarray
    length: np.ndarray
    offset: np.ndarray
    usage: np.ndarray
    clipped_steps: int = 0

    @property
    def num_apps(self) -> int:
        return len(self.submit_step)

    @property
    def num_components(self) -> int:
        return len(self.length)

    @property
    def app_of(self) -> np.ndarray:
        """int64[C] the application of every component."""
        return np.repeat(np.arange(self.num_apps), np.diff(self.app_start))

    def component_steps(self) -> int:
        """Steps of work in the workload (each component run once to completion)."""
        return int(self.length.sum())

    @classmethod
    def from_series(cls, step_s: float, submit_step: Sequence[int], priority: Sequence[int],
                    components_per_app: Sequence[int], request, elastic,
                    series: Sequence[np.ndarray], app_id=None) -> "Workload":
        """A workload from per-component usage series (float[L_c, 2] each, in application
        order); applications are sorted by (submit step, app id) and usage is clipped."""
        counts = np.asarray(components_per_app, dtype=np.int64)
        app_start = np.concatenate([[0], np.cumsum(counts)])
        lengths = np.array([len(s) for s in series], dtype=np.int64)
        if len(lengths) != app_start[-1] or np.any(lengths < 1) or np.any(counts < 1):
            raise ValueError("every application needs components with at least one step")
        request = np.asarray(request, dtype=np.float64).reshape(-1, 2)
        usage = np.concatenate([np.asarray(s, dtype=np.float64).reshape(-1, 2)
                                for s in series])
        offset = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        limit = np.repeat(request, lengths, axis=0)
        clipped = int(np.count_nonzero(usage > limit))
        elastic = np.asarray(elastic, dtype=bool)
        if np.any(np.add.reduceat(~elastic, app_start[:-1]) == 0):
            raise ValueError("every application needs a core component")
        workload = cls(float(step_s),
                       np.arange(len(counts)) if app_id is None else np.asarray(app_id),
                       np.asarray(submit_step, dtype=np.int64),
                       np.asarray(priority, dtype=np.int64), app_start, request,
                       elastic, lengths, offset,
                       np.clip(usage, 0.0, limit), clipped)
        return workload.select_apps(np.lexsort((workload.app_id, workload.submit_step)))

    def select_apps(self, apps: np.ndarray, submit_step=None) -> "Workload":
        """The workload of applications `apps` (int[A'], repeats allowed) in that order,
        sharing this workload's usage series; `submit_step` replaces their submit steps."""
        starts, ends = self.app_start[apps], self.app_start[apps + 1]
        counts = ends - starts
        components = (np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]),
                                counts) + np.arange(counts.sum()))
        return dataclasses.replace(
            self, app_id=self.app_id[apps],
            submit_step=self.submit_step[apps] if submit_step is None else submit_step,
            priority=self.priority[apps], app_start=np.concatenate([[0], np.cumsum(counts)]),
            request=self.request[components], elastic=self.elastic[components],
            length=self.length[components], offset=self.offset[components])

    def sampled(self, num_apps: int, rng: np.random.Generator) -> "Workload":
        """[Pace18] §IV-A's sampled workload: `num_apps` applications drawn with replacement from
        this one (components, requests, usage, priority together), submitted with
        inter-arrival times drawn from this workload's empirical inter-arrival times.
        Sampled applications get ids 0 .. num_apps - 1."""
        apps = rng.integers(0, self.num_apps, num_apps)
        gaps = np.diff(self.submit_step)
        drawn = rng.choice(gaps, num_apps - 1) if len(gaps) else np.zeros(num_apps - 1, int)
        submit = int(self.submit_step[0]) + np.concatenate([[0], np.cumsum(drawn)])
        sample = self.select_apps(apps, submit.astype(np.int64))
        return dataclasses.replace(sample, app_id=np.arange(num_apps))

    def with_arrival_rate(self, scale: float) -> "Workload":
        """This workload with submissions `scale` times as frequent (> 1: more load): each
        submit step becomes first + floor((submit - first) / scale), `first` the first
        submission; the order is kept."""
        if scale == 1:
            return self
        first = self.submit_step[0] if self.num_apps else 0
        submit = first + np.floor((self.submit_step - first) / scale).astype(np.int64)
        return dataclasses.replace(self, submit_step=submit)

    def usage_by_component(self):
        """(starts int64[C], within int64[S], used float64[S, 2]): every component's series
        in component order, each its own copy (S the component-steps): component c's steps
        are used[starts[c]:starts[c] + length[c]], `within` each step's age."""
        starts = np.cumsum(self.length) - self.length
        within = np.arange(self.component_steps()) - np.repeat(starts, self.length)
        return starts, within, self.usage[np.repeat(self.offset, self.length) + within]

    def with_runtime_scale(self, scale: int) -> "Workload":
        """This workload with every component `scale` times as long, each step of its usage
        held for `scale` steps ([Pace18]'s simulator multiplies the trace's job durations
        by 30); submissions unchanged."""
        if scale == 1:
            return self
        starts, _, used = self.usage_by_component()
        return dataclasses.replace(self, length=self.length * scale, offset=starts * scale,
                                   usage=np.repeat(used, scale, axis=0))

    def with_random_walk_usage(self, rng: np.random.Generator) -> "Workload":
        """This workload with [Pace18]'s simulator's synthetic usage
        (policies/shaping/random_walk_usage.py): per application and resource one curve as
        long as its longest component, its mean the application's mean usage over request
        (over all its components' steps); each component uses the curve's first steps, times
        its request, as the simulator's tasks share their job's curve."""
        starts, within, used = self.usage_by_component()
        ratio = np.divide(used, np.repeat(self.request, self.length, 0),
                          out=np.zeros_like(used), where=np.repeat(self.request > 0,
                                                                     self.length, 0))
        app_steps = np.add.reduceat(self.length, self.app_start[:-1])
        target = np.add.reduceat(ratio, starts[self.app_start[:-1]]) / app_steps[:, None]
        app_length = np.maximum.reduceat(self.length, self.app_start[:-1])
        curves = np.column_stack([random_walk_steps(app_length, int(self.step_s),
                                                    target[:, r], rng) for r in (CPU, MEMORY)])
        curve_start = np.cumsum(app_length) - app_length
        position = np.repeat(curve_start[self.app_of], self.length) + within
        return dataclasses.replace(self, offset=starts, clipped_steps=0,
                                   usage=curves[position]
                                   * np.repeat(self.request, self.length, 0))

    def with_elastic(self, fraction: float, rng: np.random.Generator) -> "Workload":
        """Marks each multi-component application elastic with probability `fraction`: its
        first component stays core (like a Spark driver), the others become elastic. The
        trace cannot tell ([Pace18] footnote 4), so with fraction 0 every component is core."""
        counts = np.diff(self.app_start)
        chosen = (counts > 1) & (rng.random(self.num_apps) < fraction)
        elastic = np.repeat(chosen, counts)
        elastic[self.app_start[:-1]] = False
        return dataclasses.replace(self, elastic=elastic)
