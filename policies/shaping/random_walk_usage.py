"""[Pace18]'s simulator's usage curves: a smoothed per-second random walk per component,
scaled to the component's mean usage, as per-step maxima.

The authors' evaluation simulator (github.com/DistributedSystemsGroup/cluster-scheduler-
simulator, TraceAllZoeWLGenerator) does not replay a trace's usage: it gives each application
a synthetic curve per resource, as a fraction of its request, with a mean drawn from the
trace. Per second: an increment N(0, 1) with probability JUMP_PROBABILITY, else 0, summed
from 0; a SMOOTHING_S-second moving average; shifted and divided by its range into [0, 1];
then scaled to the target mean with values clipped at 1. Its monitor checks and forecasts
each minute's maximum. Here each component gets such a curve of its length with its own
mean usage over request as the target; a step's usage is the curve's maximum over the
step's seconds times the request.

Two details are this module's: the moving average is trailing (the first seconds average
what there is), and the scale is the single factor f for which mean(min(f x, 1)) is the
target (the authors rescale the clipped curve until its mean rounds to the target; where no
factor reaches it, the curve is 1 wherever it is above its minimum). A curve without a jump
(a short component) is flat at its target.
"""

import numpy as np

JUMP_PROBABILITY = 0.01
SMOOTHING_S = 10
# The seed of the shaping stage's curves: every run sees the same usage.
RANDOM_WALK_SEED = 0
# Seconds of curve built at once (components whole): bounds the memory to ~50 bytes each.
CHUNK_S = 1 << 23
# The search for a curve's scale: doublings of its upper bound, then halvings of the bracket
# (2^-40 of its width).
MAX_DOUBLINGS = 64
UNIT_ROUNDING = 1e-9
BISECTIONS = 40


def draw_increments(durations_s: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """float64[sum(durations_s)] per-second increments of the components' walks, component
    after component: N(0, 1) with probability JUMP_PROBABILITY, else 0; each component's first
    second is 0 (its walk starts at 0)."""
    total = int(durations_s.sum())
    increments = np.zeros(total)
    jumps = np.flatnonzero(rng.random(total) < JUMP_PROBABILITY)
    increments[jumps] = rng.standard_normal(len(jumps))
    increments[np.cumsum(durations_s) - durations_s] = 0.0
    return increments


def smoothed_walks(increments: np.ndarray, durations_s: np.ndarray) -> np.ndarray:
    """float64[S] each component's walk (the running sum of its increments, up to a constant
    per component) averaged over its last SMOOTHING_S seconds (fewer at its start)."""
    walk = np.cumsum(increments)
    smooth = np.convolve(walk, np.full(SMOOTHING_S, 1.0 / SMOOTHING_S))[:len(walk)]
    starts = np.cumsum(durations_s) - durations_s
    running = np.zeros(len(starts))
    for j in range(min(SMOOTHING_S - 1, int(durations_s.max(initial=0)))):
        inside = durations_s > j
        running[inside] += walk[starts[inside] + j]
        smooth[starts[inside] + j] = running[inside] / (j + 1)
    return smooth


def mean_scale(values: np.ndarray, weights: np.ndarray, owner: np.ndarray,
               target: np.ndarray) -> np.ndarray:
    """float64[n] per component the factor f >= 0 for which the weighted mean of
    min(f x, 1) over its values x (values float64[k] in [0, 1], weights float64[k] > 0,
    owner int64[k] their component, ascending) is its target (float64[n] in [0, 1)), by
    bisection; infinite where the target is out of reach."""
    n = len(target)
    total = np.bincount(owner, weights, n)
    mean = np.bincount(owner, weights * values, n) / np.where(total > 0, total, 1.0)
    positive = mean > 0
    # Clipping only lowers the mean: target / mean(x) is a lower bound, and the answer where
    # it clips nothing (f <= 1, as x <= 1); doubled, an upper bound.
    factor = np.where(positive, target / np.where(positive, mean, 1.0), 0.0)
    # As f grows, mean(min(f x, 1)) rises to the weight of the values x > 0: a target at or
    # above it is out of reach, and the curve is then 1 wherever x > 0 (f infinite).
    reach = np.bincount(owner, weights * (values > 0), n) / np.where(total > 0, total, 1.0)
    factor[positive & (reach <= target)] = np.inf
    search = np.flatnonzero(np.isfinite(factor) & (factor > 1.0))
    if not len(search):
        return factor
    kept = np.isin(owner, search)
    factor[search] = _bisection(values[kept], weights[kept],
                                np.searchsorted(search, owner[kept]), target[search],
                                factor[search])
    return factor


def _bisection(values, weights, owner, target, low):
    """mean_scale's search where target / mean(x) clips: f in [low, ...) by doubling the
    upper bound, then halving the bracket."""
    n = len(target)
    total = np.bincount(owner, weights, n)

    def clipped_mean(factor):
        return np.bincount(owner, weights * np.minimum(values * factor[owner], 1.0), n) / total

    high = low.copy()
    for _ in range(MAX_DOUBLINGS):
        short = clipped_mean(high) < target
        if not short.any():
            break
        high[short] *= 2.0
    for _ in range(BISECTIONS):
        middle = 0.5 * (low + high)
        below = clipped_mean(middle) < target
        low, high = np.where(below, middle, low), np.where(below, high, middle)
    return 0.5 * (low + high)


def steps_from_increments(increments: np.ndarray, lengths: np.ndarray, step_s: int,
                          target: np.ndarray) -> np.ndarray:
    """float64[sum(lengths)] per-step usage fractions of components (lengths int64[n] steps
    of step_s seconds; increments float64[sum(lengths) * step_s] their per-second increments;
    target float64[n] in [0, 1)): each step's maximum of the component's scaled unit curve."""
    durations_s = lengths * step_s
    smooth = smoothed_walks(increments, durations_s)
    starts = np.cumsum(durations_s) - durations_s
    low = np.minimum.reduceat(smooth, starts)
    span = np.maximum.reduceat(smooth, starts) - low
    jumps = np.add.reduceat(increments != 0, starts)
    # A walk without a jump is constant: flat at its target.
    span = np.where(jumps > 0, span, 0.0)
    inverse = np.divide(1.0, span, out=np.zeros_like(span), where=span > 0)
    # The unit curves by runs of equal smoothed values (a walk is constant between jumps).
    change = np.ones(len(smooth), dtype=bool)
    change[1:] = smooth[1:] != smooth[:-1]
    change[starts] = True
    run_start = np.flatnonzero(change)
    run_owner = np.repeat(np.arange(len(lengths)), np.add.reduceat(change, starts))
    run_x = unit(smooth[run_start], low[run_owner], inverse[run_owner])
    weights = np.diff(np.append(run_start, len(smooth))).astype(np.float64)
    factor = mean_scale(run_x, weights, run_owner, target)
    step_owner = np.repeat(np.arange(len(lengths)), lengths)
    step_x = unit(smooth.reshape(-1, step_s).max(axis=1), low[step_owner],
                  inverse[step_owner])
    factor = factor[step_owner]
    out_of_reach = np.isinf(factor)
    scaled = np.where(out_of_reach, step_x > 0,
                      np.minimum(step_x * np.where(out_of_reach, 0.0, factor), 1.0))
    return np.where(span[step_owner] > 0, scaled, target[step_owner])


def unit(smooth, low, inverse):
    """(smooth - low) * inverse in [0, 1], rounding noise within UNIT_ROUNDING of 0 set to 0
    (a plateau at the minimum averaged two ways can differ in its last bits)."""
    x = np.clip((smooth - low) * inverse, 0.0, 1.0)
    x[x < UNIT_ROUNDING] = 0.0
    return x


def random_walk_steps(lengths: np.ndarray, step_s: int, target: np.ndarray,
                      rng: np.random.Generator) -> np.ndarray:
    """float64[sum(lengths)] per-step usage fractions in [0, 1] of n components (lengths
    int64[n] >= 1 steps of step_s seconds; target float64[n] in [0, 1], each component's mean
    usage over its request), component after component (the module docstring); drawn
    CHUNK_S seconds of components at a time."""
    lengths = np.asarray(lengths, dtype=np.int64)
    target = np.clip(np.asarray(target, dtype=np.float64), 0.0, 1.0 - 1e-9)
    parts, begin = [], 0
    while begin < len(lengths):
        end = begin + max(1, int(np.searchsorted(np.cumsum(lengths[begin:]) * step_s,
                                                 CHUNK_S, side="right")))
        increments = draw_increments(lengths[begin:end] * step_s, rng)
        parts.append(steps_from_increments(increments, lengths[begin:end], step_s,
                                           target[begin:end]))
        begin = end
    return np.concatenate(parts) if parts else np.zeros(0)
