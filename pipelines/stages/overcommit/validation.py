"""Validation of the overcommit stage's config (OvercommitConfig), by field path."""

from configs.checks import WEEK_OF_SAMPLES, Limit
from predictors.peak.registry import validate_predictor

# The percentiles a Google v3 usage window carries (cpu_usage_distribution and
# tail_cpu_usage_distribution).
VALID_CPU_PERCENTILES = frozenset(range(0, 101, 10)) | frozenset(range(91, 100))
# A step merges each task's usage windows (300 s in the Google and Azure traces) into one
# sample: past a day, a month-long trace is a few dozen samples.
MAX_STEP = Limit(86_400, "s (a day)", "a step merges each task's usage windows in it "
                 "(300 s long) into one sample")
# The oracle holds a float64[machine steps, horizon steps] band per machine: 16 kB per step
# at a week of 5-minute steps.
MAX_HORIZON_STEPS = WEEK_OF_SAMPLES
# Machines are hash buckets of instance ids: 80 x a Google 2019 cell (~12,000 machines).
MAX_RANDOM_MACHINES = Limit(1_000_000, "machines", "80 x a Google 2019 cell; each machine "
                            "with samples is a Beam element and a time series")


# --- Config validation ------------------------------------------------------------------------

def validate_config(check, config, source=None, has_usage: bool = True,
                    field: str = "overcommit"):
    """Checks an OvercommitConfig.

    Args:
      check: a configs.checks.Checker.
      source: the run's TraceSource registry entry (None: the run loads its tables).
      has_usage: whether the run has a usage table (from the source or loaded).
    """
    scheduled_loaded = config.scheduled_usage.HasField("input")
    check.require(len(config.fortune_teller) > 0, f"{field}.fortune_teller",
                  "is required: the overcommit stages run only with fortune tellers")
    for name in ("filtered_usage", "scheduled_usage"):
        if config.HasField(name):
            check.load_or_write(getattr(config, name), f"{field}.{name}")
    if config.HasField("filter"):
        _validate_filter(check, config.filter, f"{field}.filter")
    if config.HasField("metric"):
        _validate_metric(check, config.metric, source, f"{field}.metric")
    if config.HasField("reset_and_shift"):
        _validate_reset_and_shift(check, config.reset_and_shift, f"{field}.reset_and_shift")
    if config.HasField("scheduler"):
        _validate_scheduler(check, config.scheduler, source, f"{field}.scheduler")
    if config.HasField("violation_budget"):
        budget, at = config.violation_budget, f"{field}.violation_budget"
        check.require(0 <= budget.machine_percentile <= 100, f"{at}.machine_percentile",
                      f"must be in [0, 100], got {budget.machine_percentile}")
        check.require(0 <= budget.max_violation_rate <= 1, f"{at}.max_violation_rate",
                      f"must be in [0, 1], got {budget.max_violation_rate}")
    if scheduled_loaded and config.filtered_usage.HasField("input"):
        check.fail(f"{field}.filtered_usage.input", "is unused: scheduled_usage is loaded")
    if config.fortune_teller:
        check.require(has_usage, f"{field}.fortune_teller",
                      "needs a usage table: the source gives none and usage is not loaded")
        if not scheduled_loaded:
            check.require(config.HasField("metric"), f"{field}.metric",
                          "is required with fortune_teller: avg_cpu, max_cpu, cpu_percentile, "
                          "avg_memory or max_memory")
            if source is not None and not source.has_hosts and not config.HasField(
                    "scheduler"):
                check.fail(f"{field}.scheduler",
                           f"{source.title} has no machines: set scheduler.at_random")
    _validate_tellers(check, config.fortune_teller, config.metric.step_s,
                      f"{field}.fortune_teller")


def _validate_filter(check, config, field: str):
    check.range(config.priority_range, f"{field}.priority_range")
    check.range(config.scheduling_class_range, f"{field}.scheduling_class_range")
    if config.HasField("start_time") and config.HasField("end_time"):
        check.require(config.start_time < config.end_time, f"{field}.end_time",
                      "must be after filter.start_time")


def _validate_metric(check, config, source, field: str):
    which = config.WhichOneof("metric")
    check.require(which is not None, field, "names no metric")
    if which == "cpu_percentile":
        check.require(config.cpu_percentile in VALID_CPU_PERCENTILES, f"{field}.cpu_percentile",
                      f"must be one of 0, 10, ..., 100 or 91..99, got {config.cpu_percentile}")
    if which and source is not None and source.usage_metrics is not None \
            and which not in source.usage_metrics:
        check.fail(f"{field}.{which}",
                   f"{source.title} has only {' and '.join(sorted(source.usage_metrics))}")
    check.positive(config, "step_s", field, maximum=MAX_STEP)


def _validate_reset_and_shift(check, config, field: str):
    if config.HasField("random_shift"):
        for bound in ("lower_bound", "upper_bound"):
            check.require(config.random_shift.HasField(bound),
                          f"{field}.random_shift.{bound}", "is required")
        check.range(config.random_shift, f"{field}.random_shift")
        for bound in ("lower_bound", "upper_bound"):
            check.trace_time(config.random_shift, bound, f"{field}.random_shift")
    check.positive(config, "num_shards", field)


def _validate_scheduler(check, config, source, field: str):
    which = config.WhichOneof("scheduler")
    check.require(which is not None, field, "names neither by_machine_id nor at_random")
    if which == "at_random":
        check.positive(config.at_random, "num_machines", f"{field}.at_random",
                       maximum=MAX_RANDOM_MACHINES)
    if which == "by_machine_id" and source is not None and not source.has_hosts:
        check.fail(f"{field}.by_machine_id",
                   f"{source.title} has no machines: use scheduler.at_random")


def _validate_tellers(check, tellers, step_s: int, field: str):
    kinds = [teller.WhichOneof("teller") for teller in tellers]
    check.require("predictor" not in kinds or "oracle" in kinds, field,
                  "predictors are scored against the first oracle teller: add one, e.g. "
                  "fortune_teller { name: \"oracle\" oracle {} }")
    names = set()
    for i, teller in enumerate(tellers):
        at = f"{field}[{i}]"
        check.require(bool(teller.name), f"{at}.name", "is required")
        check.require(teller.name not in names, f"{at}.name", f"{teller.name!r} is used twice")
        names.add(teller.name)
        if kinds[i] is None:
            check.fail(at, "names neither oracle nor predictor")
        elif kinds[i] == "oracle":
            check.positive(teller.oracle, "horizon_s", f"{at}.oracle", allow_zero=True,
                           maximum=_horizon_limit(step_s))
            check.fraction(teller.oracle, "percentile", f"{at}.oracle", 100)
        else:
            validate_predictor(check, teller.predictor, f"{at}.predictor")


def _horizon_limit(step_s: int) -> Limit:
    """The oracle's horizon_s bound: MAX_HORIZON_STEPS steps of `step_s` seconds."""
    steps = f"{MAX_HORIZON_STEPS:,} steps of metric.step_s {step_s} s"
    return Limit(MAX_HORIZON_STEPS * max(step_s, 1), f"s ({steps})",
                 "the oracle holds a float64 band of horizon_s / step_s values per machine step")
