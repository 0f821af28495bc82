"""The placement stage's admission by predicted peak: the configured admissions and the
`Admission` of a replay (policies/replay/admission.py); their checks are validation.py's,
the pools' usage samples usage.py's."""

from typing import Optional

import numpy as np

from pipelines.stages.overcommit.tellers import TellerFactory
from pipelines.stages.placement.specs import (
    COMBINED_KINDS,
    REQUESTS,
    SHARED_KINDS,
    WINDOW_KINDS,
    unsupported_admission,
)
from policies.replay.admission import (
    Admission,
    CombinedPeaks,
    HistoryPeaks,
    HostPeaks,
    OraclePeaks,
    TaskSharePeaks,
)
from policies.replay.usage import VmUsage
from predictors.peak.registry import build_predictor


def admission_names(config) -> list:
    """The configured admissions by name, in config order ("requests" or a teller's name);
    [None] without any (admission by requests, no usage replayed)."""
    names = [REQUESTS if a.WhichOneof("rule") == "requests" else a.fortune_teller
             for a in config.admission]
    return names or [None]


# --- The admission of a replay ----------------------------------------------------------------

def host_peaks(teller, usage: VmUsage, step_s: float, admits: bool,
               cache: Optional[dict] = None) -> HostPeaks:
    """The HostPeaks of a FortuneTeller message on a pool's `usage`; an oracle that `admits`
    reads the windows left up to the data's end (`OraclePeaks.partial`), the scoring oracle
    does not. A predictor's HostPeaks are kept in `cache` by configuration, so that a
    predictor inside a max_of / avg_of shares the per-pool work of the same one alone."""
    if teller.WhichOneof("teller") == "oracle":
        oracle = teller.oracle
        return OraclePeaks(usage, int(oracle.horizon_s // step_s), oracle.percentile,
                           oracle.cap_to_limit, partial=admits)
    return _predictor_peaks(teller.predictor, usage, TellerFactory(step_s),
                            {} if cache is None else cache)


def _predictor_peaks(config, usage: VmUsage, factory: TellerFactory, cache: dict) -> HostPeaks:
    key = config.SerializeToString(deterministic=True)
    if key in cache:
        return cache[key]
    which = config.WhichOneof("predictor")
    if which in COMBINED_KINDS:
        peaks = CombinedPeaks(COMBINED_KINDS[which], [
            _predictor_peaks(inner, usage, factory, cache)
            for inner in getattr(config, which).predictors])
    elif which in SHARED_KINDS:
        peaks = TaskSharePeaks(build_predictor(config, factory), usage)
    elif which in WINDOW_KINDS:
        peaks = HistoryPeaks(build_predictor(config, factory), usage)
    else:
        raise ValueError(f"a {which} predictor cannot admit ({unsupported_admission(config)})")
    cache[key] = peaks
    return peaks


def scoring_teller(overcommit):
    """The overcommit stage's scoring oracle (its first oracle teller)."""
    return next(t for t in overcommit.fortune_teller if t.WhichOneof("teller") == "oracle")


def make_admission(name: Optional[str], usage: Optional[VmUsage], request_cpu: np.ndarray,
                   overcommit, peaks_cache: Optional[dict] = None) -> Optional[Admission]:
    """The Admission named `name` (None: none) of a replay of a pool with `usage`; the
    tellers' HostPeaks are kept in `peaks_cache` (per pool) when given, as they hold
    per-pool work (a predictor's shares of every sample)."""
    if name is None:
        return None
    step_s = overcommit.metric.step_s
    cache = {} if peaks_cache is None else peaks_cache

    def peaks_of(teller, admits: bool):
        key = (teller.name, admits)
        if key not in cache:
            cache[key] = host_peaks(teller, usage, step_s, admits,
                                    cache.setdefault("predictors", {}))
        return cache[key]

    scoring = peaks_of(scoring_teller(overcommit), False)
    teller = next((t for t in overcommit.fortune_teller if t.name == name), None)
    peaks = None if name == REQUESTS else peaks_of(teller, True)
    return Admission(usage, request_cpu, scoring, peaks, name)
