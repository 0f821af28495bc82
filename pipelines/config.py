"""Loading and validating run configs (configs/fleetcast.proto, text format).

`load_config` parses a text config; `validate` checks what the schema cannot express (ranges,
required fields per source, inputs that exist) and reports every problem by its field path,
e.g. ``fortune_teller[1].predictor.rc_like.percentile: must be in [0, 100], got 120``.
"""

import dataclasses
import pathlib

from apache_beam.io.filesystems import FileSystems
from google.protobuf import text_format

from configs import fleetcast_pb2

# The percentiles a Google v3 usage window carries (cpu_usage_distribution and
# tail_cpu_usage_distribution).
VALID_CPU_PERCENTILES = frozenset(range(0, 101, 10)) | frozenset(range(91, 100))


@dataclasses.dataclass(frozen=True)
class ConfigProblem:
    field: str
    reason: str

    def __str__(self):
        return f"{self.field}: {self.reason}"


class ConfigError(ValueError):
    """A config that cannot run; `problems` lists every field at fault."""

    def __init__(self, source: str, problems):
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"invalid config {source}:\n{lines}")


def parse_config(text: str, source: str = "<config>") -> fleetcast_pb2.RunConfig:
    """Parses text-format `text`; a syntax error names the line, column and field."""
    try:
        return text_format.Parse(text, fleetcast_pb2.RunConfig())
    except text_format.ParseError as e:
        raise ConfigError(source, [ConfigProblem(f"line {e.GetLine()}", str(e))]) from None


def load_config(path: str, check_inputs: bool = True) -> fleetcast_pb2.RunConfig:
    """Reads, parses and validates the config at `path`; raises ConfigError."""
    if not FileSystems.exists(path):
        raise ConfigError(path, [ConfigProblem("<file>", "config file does not exist")])
    with FileSystems.open(path) as f:
        config = parse_config(f.read().decode("utf-8"), path)
    problems = validate(config, check_inputs=check_inputs)
    if problems:
        raise ConfigError(path, problems)
    return config


def config_name(config: fleetcast_pb2.RunConfig, path: str) -> str:
    """The run's name: `name` from the config, else the config file's stem."""
    return config.name or pathlib.Path(path).name.split(".")[0]


class _Checker:
    """Collects problems while walking a config."""

    def __init__(self, check_inputs: bool):
        self.check_inputs = check_inputs
        self.problems = []

    def fail(self, field: str, reason: str):
        self.problems.append(ConfigProblem(field, reason))

    def require(self, condition: bool, field: str, reason: str):
        if not condition:
            self.fail(field, reason)

    def positive(self, message, name: str, field: str, allow_zero=False):
        value = getattr(message, name)
        ok = value >= 0 if allow_zero else value > 0
        self.require(ok, f"{field}.{name}",
                     f"must be {'>= 0' if allow_zero else '> 0'}, got {value}")

    def fraction(self, message, name: str, field: str, upper: float = 1.0):
        value = getattr(message, name)
        self.require(0 <= value <= upper, f"{field}.{name}",
                     f"must be in [0, {upper:g}], got {value}")

    def range(self, message, field: str):
        if message.HasField("lower_bound") and message.HasField("upper_bound"):
            self.require(message.lower_bound <= message.upper_bound, field,
                         f"lower_bound {message.lower_bound} > upper_bound {message.upper_bound}")

    def path_exists(self, pattern: str, field: str):
        if not pattern:
            self.fail(field, "is required")
        elif self.check_inputs and not _matches(pattern):
            self.fail(field, f"no file matches {pattern!r}")

    def location(self, message, field: str):
        which = message.WhichOneof("location")
        if which is None:
            self.fail(field, "names neither parquet nor bigquery_table")
        elif which == "bigquery_table":
            self.require("." in message.bigquery_table, f"{field}.bigquery_table",
                         "must be 'dataset.table' or 'project:dataset.table'")

    def load_or_write(self, config, name: str):
        if config.HasField(name):
            message = getattr(config, name)
            which = message.WhichOneof("load_or_write")
            if which is None:
                self.fail(name, "names neither input nor output")
            else:
                self.location(getattr(message, which), f"{name}.{which}")
                if which == "input" and message.input.WhichOneof("location") == "parquet":
                    self.path_exists(message.input.parquet.rstrip("/") + "/*",
                                     f"{name}.input.parquet")


def _matches(pattern: str) -> bool:
    try:
        return any(r.metadata_list for r in FileSystems.match([pattern]))
    except Exception:  # pylint: disable=broad-except
        # FileSystems raises for a pattern that matches nothing on some file systems.
        return False


def _loaded(config, name: str) -> bool:
    return config.HasField(name) and getattr(config, name).HasField("input")


def validate(config: fleetcast_pb2.RunConfig, check_inputs: bool = True):
    """Every problem of `config` as a list of ConfigProblem (empty when it can run).

    With `check_inputs`, file inputs must exist now (fail fast instead of mid-run).
    """
    check = _Checker(check_inputs)
    source = config.WhichOneof("source")
    for table in ("machines", "instances", "usage"):
        check.load_or_write(config, table)
    for table in ("filtered_usage", "scheduled_usage"):
        check.load_or_write(config, table)

    if source is None and not any(_loaded(config, t) for t in (
            "instances", "usage", "filtered_usage", "scheduled_usage")):
        check.fail("source", "no source (google_v3, azure_v1, azure_packing_2020, synthetic) "
                   "and no loaded canonical table")
    if source == "google_v3":
        _validate_google_v3(check, config.google_v3)
    elif source == "azure_v1":
        _validate_azure_v1(check, config)
    elif source == "azure_packing_2020":
        check.path_exists(config.azure_packing_2020.sqlite_path, "azure_packing_2020.sqlite_path")
    elif source == "synthetic":
        check.positive(config.synthetic, "machines", "synthetic")
        check.positive(config.synthetic, "days", "synthetic")
        if config.synthetic.HasField("arrival_rate_per_machine_hour"):
            check.positive(config.synthetic, "arrival_rate_per_machine_hour", "synthetic")

    _validate_overcommit(check, config, source)
    if config.HasField("lifetime_model"):
        _validate_lifetime(check, config.lifetime_model)
    if config.HasField("placement"):
        _validate_placement(check, config, source)
    check.positive(config.output, "num_shards", "output")
    if config.output.WhichOneof("sink") == "bigquery_dataset":
        dataset = config.output.bigquery_dataset
        check.require(dataset and "." not in dataset.split(":")[-1], "output.bigquery_dataset",
                      f"must be 'dataset' or 'project:dataset', got {dataset!r}")
    return check.problems


def _validate_table_input(check, message, field: str, required: bool):
    which = message.WhichOneof("input")
    if which is None:
        if required:
            check.fail(field, "is required (path, bigquery_table or bigquery_query)")
    elif which == "path":
        check.path_exists(message.path, f"{field}.path")
    elif which == "bigquery_table":
        check.require("." in message.bigquery_table, f"{field}.bigquery_table",
                      "must be 'dataset.table' or 'project:dataset.table'")


def _validate_google_v3(check, source):
    check.positive(source, "num_shards", "google_v3")
    _validate_table_input(check, source.instance_events, "google_v3.instance_events", True)
    for name in ("instance_usage", "machine_events", "collection_events"):
        _validate_table_input(check, getattr(source, name), f"google_v3.{name}", False)


def _validate_azure_v1(check, config):
    source = config.azure_v1
    check.require(source.vmtable or source.vm_cpu_readings, "azure_v1",
                  "names neither vmtable nor vm_cpu_readings")
    for name in ("vmtable", "vm_cpu_readings"):
        if getattr(source, name):
            check.path_exists(getattr(source, name), f"azure_v1.{name}")
    check.positive(source, "num_shards", "azure_v1")
    check.positive(source, "default_core_count", "azure_v1")
    check.positive(source, "default_memory_gb", "azure_v1")


def _has_usage(config, source) -> bool:
    if _loaded(config, "usage") or _loaded(config, "filtered_usage") or _loaded(
            config, "scheduled_usage"):
        return True
    if source == "google_v3":
        return config.google_v3.instance_usage.WhichOneof("input") is not None
    if source == "azure_v1":
        return bool(config.azure_v1.vm_cpu_readings)
    return source == "synthetic"


OVERCOMMIT_FIELDS = ("filter", "filtered_usage", "metric", "reset_and_shift", "scheduler",
                     "scheduled_usage")


def _validate_overcommit(check, config, source):
    if not config.fortune_teller:
        for name in OVERCOMMIT_FIELDS:
            check.require(not config.HasField(name), name,
                          "has no effect: the overcommit stages run only with fortune_teller")
    if config.HasField("filter"):
        check.range(config.filter.priority_range, "filter.priority_range")
        check.range(config.filter.scheduling_class_range, "filter.scheduling_class_range")
        if config.filter.HasField("start_time") and config.filter.HasField("end_time"):
            check.require(config.filter.start_time < config.filter.end_time, "filter.end_time",
                          "must be after filter.start_time")
    if config.HasField("metric"):
        which = config.metric.WhichOneof("metric")
        check.require(which is not None, "metric", "names no metric")
        if which == "cpu_percentile":
            check.require(config.metric.cpu_percentile in VALID_CPU_PERCENTILES,
                          "metric.cpu_percentile",
                          f"must be one of 0, 10, ..., 100 or 91..99, got "
                          f"{config.metric.cpu_percentile}")
        if source in ("azure_v1",) and which in ("cpu_percentile", "avg_memory", "max_memory"):
            check.fail(f"metric.{which}", "the Azure V1 trace has only avg_cpu and max_cpu")
        check.positive(config.metric, "step_s", "metric")
    if config.HasField("reset_and_shift"):
        reset = config.reset_and_shift
        if reset.HasField("random_shift"):
            for bound in ("lower_bound", "upper_bound"):
                check.require(reset.random_shift.HasField(bound),
                              f"reset_and_shift.random_shift.{bound}", "is required")
            check.range(reset.random_shift, "reset_and_shift.random_shift")
        check.positive(reset, "num_shards", "reset_and_shift")
    if config.HasField("scheduler"):
        which = config.scheduler.WhichOneof("scheduler")
        check.require(which is not None, "scheduler", "names neither by_machine_id nor at_random")
        if which == "at_random":
            check.positive(config.scheduler.at_random, "num_machines", "scheduler.at_random")
        if which == "by_machine_id" and source == "azure_v1":
            check.fail("scheduler.by_machine_id",
                       "the Azure V1 trace has no machines: use scheduler.at_random")
    if _loaded(config, "scheduled_usage") and _loaded(config, "filtered_usage"):
        check.fail("filtered_usage.input", "is unused: scheduled_usage is loaded")
    if config.fortune_teller:
        check.require(_has_usage(config, source), "fortune_teller",
                      "needs a usage table: the source gives none and usage is not loaded")
        if not _loaded(config, "scheduled_usage"):
            check.require(config.HasField("metric"), "metric",
                          "is required with fortune_teller: avg_cpu, max_cpu, cpu_percentile, "
                          "avg_memory or max_memory")
            if source == "azure_v1" and not config.HasField("scheduler"):
                check.fail("scheduler",
                           "the Azure V1 trace has no machines: set scheduler.at_random")
        kinds = [teller.WhichOneof("teller") for teller in config.fortune_teller]
        check.require("predictor" not in kinds or "oracle" in kinds, "fortune_teller",
                      "predictors are scored against the first oracle teller: add one, e.g. "
                      "fortune_teller { name: \"oracle\" oracle {} }")
    names = set()
    for i, teller in enumerate(config.fortune_teller):
        field = f"fortune_teller[{i}]"
        check.require(bool(teller.name), f"{field}.name", "is required")
        check.require(teller.name not in names, f"{field}.name",
                      f"{teller.name!r} is used twice")
        names.add(teller.name)
        which = teller.WhichOneof("teller")
        if which is None:
            check.fail(field, "names neither oracle nor predictor")
        elif which == "oracle":
            check.positive(teller.oracle, "horizon_s", f"{field}.oracle", allow_zero=True)
            check.fraction(teller.oracle, "percentile", f"{field}.oracle", 100)
        else:
            _validate_predictor(check, teller.predictor, f"{field}.predictor")


def _validate_predictor(check, predictor, field: str):
    """The constructor's constraints of each predictor (predictors/*.py), by field."""
    which = predictor.WhichOneof("predictor")
    if which is None:
        check.fail(field, "names no predictor")
        return
    message = getattr(predictor, which)
    field = f"{field}.{which}"
    if which in ("max_of", "avg_of"):
        check.require(len(message.predictors) > 0, f"{field}.predictors", "is empty")
        for i, inner in enumerate(message.predictors):
            _validate_predictor(check, inner, f"{field}.predictors[{i}]")
        return
    check.positive(message, "min_num_samples", field, allow_zero=True)
    for name in ("num_history_samples", "refit_every_steps"):
        if hasattr(message, name):
            check.positive(message, name, field)
    if hasattr(message, "percentile"):
        check.fraction(message, "percentile", field, 100)
    if which == "borg_default":
        check.positive(message, "phi", field, allow_zero=True)
    if which == "n_sigma":
        check.positive(message, "n", field, allow_zero=True)
        check.require(message.num_history_samples >= 2, f"{field}.num_history_samples",
                      f"must be >= 2 (a standard deviation needs two), got "
                      f"{message.num_history_samples}")
    if which in ("arima", "gaussian_process"):
        check.require(2 <= message.min_fit_samples <= message.num_history_samples,
                      f"{field}.min_fit_samples",
                      f"must be in [2, num_history_samples {message.num_history_samples}], got "
                      f"{message.min_fit_samples}")
    if which == "arima":
        for i, order in enumerate(message.order):
            for name in ("p", "d", "q"):
                check.positive(order, name, f"{field}.order[{i}]", allow_zero=True)
    if which == "gaussian_process":
        check.require(1 <= message.pattern_length <= message.min_fit_samples - 2,
                      f"{field}.pattern_length",
                      f"must be in [1, min_fit_samples - 2 = {message.min_fit_samples - 2}] "
                      f"(two training patterns), got {message.pattern_length}")


def _validate_lifetime(check, model):
    # Imported here so that configs without a lifetime stage validate without the model code.
    from predictors.lifetime.features import CATEGORICAL, FEATURES

    field = "lifetime_model"
    for name in ("lifetime_cap_s", "num_trees", "num_leaves", "min_data_in_leaf",
                 "min_category_count", "la_threshold_s", "learning_rate", "num_threads",
                 "uptime_examples_per_instance", "min_remaining_s", "long_lived_threshold_s",
                 "long_lived_decision_s", "num_uptime_quantiles", "num_shards"):
        check.positive(model, name, field)
    check.positive(model, "early_stopping_rounds", field, allow_zero=True)
    check.require(0 < model.train_fraction < 1, f"{field}.train_fraction",
                  f"must be in (0, 1), got {model.train_fraction}")
    check.require(0 <= model.validation_fraction < 1, f"{field}.validation_fraction",
                  f"must be in [0, 1), got {model.validation_fraction}")
    check.require(model.num_leaves >= 2, f"{field}.num_leaves",
                  f"must be >= 2 (a tree needs two leaves), got {model.num_leaves}")
    check.require(model.uptime_max_bin >= 2, f"{field}.uptime_max_bin",
                  f"must be >= 2, got {model.uptime_max_bin}")
    check.require(model.min_remaining_s <= model.lifetime_cap_s, f"{field}.min_remaining_s",
                  f"must not exceed lifetime_cap_s {model.lifetime_cap_s}, got "
                  f"{model.min_remaining_s}")
    check.fraction(model, "la_target_recall", field)
    check.fraction(model, "la_decision_probability", field)
    kinds = {name: kind for name, kind, _ in FEATURES}
    for i, name in enumerate(model.feature):
        check.require(name in kinds, f"{field}.feature[{i}]",
                      f"unknown feature {name!r}; known: {', '.join(kinds)}")
    for i, name in enumerate(model.kaplan_meier_stratum_feature):
        check.require(kinds.get(name) == CATEGORICAL, f"{field}.kaplan_meier_stratum_feature[{i}]",
                      f"{name!r} is not a categorical feature; categorical: "
                      f"{', '.join(n for n, k in kinds.items() if k == CATEGORICAL)}")
    if model.HasField("examples"):
        which = model.examples.WhichOneof("load_or_write")
        if which == "output":
            check.location(model.examples.output, f"{field}.examples.output")
        else:
            check.fail(f"{field}.examples", "only output is supported: examples are derived "
                       "from the instances (load the instances table instead)")


def _validate_placement(check, config, source):
    placement = config.placement
    field = "placement"
    check.require(len(placement.policy) > 0, f"{field}.policy", "names no policy")
    for i, policy in enumerate(placement.policy):
        check.require(policy != fleetcast_pb2.PlacementConfig.POLICY_UNSPECIFIED,
                      f"{field}.policy[{i}]", "is POLICY_UNSPECIFIED")
    check.require(len(placement.lifetime_source) > 0, f"{field}.lifetime_source",
                  "names no lifetime source")
    for i, lifetime in enumerate(placement.lifetime_source):
        which = lifetime.WhichOneof("source")
        check.require(which is not None, f"{field}.lifetime_source[{i}]", "names no source")
        if which == "noisy_oracle_accuracy":
            check.fraction(lifetime, "noisy_oracle_accuracy", f"{field}.lifetime_source[{i}]")
        if which in ("uptime_model", "one_shot_model"):
            check.require(config.HasField("lifetime_model"), f"{field}.lifetime_source[{i}]",
                          f"{which} needs a lifetime_model stage")
        if which == "one_shot_model" and config.HasField("lifetime_model"):
            check.require(config.lifetime_model.train_la_classifier,
                          f"{field}.lifetime_source[{i}]",
                          "one_shot_model needs lifetime_model.train_la_classifier")
    hostless = source in ("azure_v1", "azure_packing_2020")
    if hostless or placement.HasField("host_shape"):
        check.require(placement.HasField("host_shape"), f"{field}.host_shape",
                      "is required: this trace has no hosts")
        if placement.HasField("host_shape"):
            check.positive(placement.host_shape, "cpu", f"{field}.host_shape")
            check.positive(placement.host_shape, "memory", f"{field}.host_shape")
    if placement.HasField("host_count"):
        check.positive(placement, "host_count", field)
    check.require(0 < placement.target_utilization <= 1, f"{field}.target_utilization",
                  f"must be in (0, 1], got {placement.target_utilization}")
    check.positive(placement, "warmup_s", field, allow_zero=True)
    check.positive(placement, "sample_period_s", field)
    check.positive(placement, "refresh_interval_s", field, allow_zero=True)
    if placement.HasField("best_fit_weights"):
        check.positive(placement.best_fit_weights, "cpu", f"{field}.best_fit_weights")
        check.positive(placement.best_fit_weights, "memory", f"{field}.best_fit_weights")
    for name in ("pbfr_num_buckets", "dpbfr_long_lived_num_buckets",
                 "dpbfr_long_lived_threshold_s", "la_binary_threshold_s",
                 "class_first_fit_time_unit_s", "inflation_max_shapes",
                 "inflation_copies_per_round"):
        check.positive(placement, name, field)
    thresholds = list(placement.la_class_threshold_s)
    check.require(all(t > 0 for t in thresholds) and thresholds == sorted(set(thresholds)),
                  f"{field}.la_class_threshold_s",
                  f"must be positive and strictly increasing, got {thresholds}")
    check.require(0 < placement.lava_recycle_fraction <= 1, f"{field}.lava_recycle_fraction",
                  f"must be in (0, 1], got {placement.lava_recycle_fraction}")
    check.positive(placement, "stranding_every", field, allow_zero=True)
    if placement.HasField("start_time_us") and placement.HasField("end_time_us"):
        check.require(placement.start_time_us <= placement.end_time_us,
                      f"{field}.end_time_us",
                      f"is before start_time_us ({placement.end_time_us} < "
                      f"{placement.start_time_us})")
    if placement.HasField("lars"):
        lars, lars_field = placement.lars, f"{field}.lars"
        check.require(len(lars.order) > 0, f"{lars_field}.order", "names no order")
        for i, order in enumerate(lars.order):
            check.require(order != fleetcast_pb2.PlacementConfig.Lars.ORDER_UNSPECIFIED,
                          f"{lars_field}.order[{i}]", "is ORDER_UNSPECIFIED")
        check.require(lars.HasField("empty_hosts_threshold_pct"),
                      f"{lars_field}.empty_hosts_threshold_pct", "is required")
        check.fraction(lars, "empty_hosts_threshold_pct", lars_field, upper=100.0)
        for name in ("max_inflight", "migration_duration_s", "max_draining_hosts",
                     "check_period_s"):
            check.positive(lars, name, lars_field)
        for i, policy in enumerate(lars.policy):
            check.require(policy in placement.policy, f"{lars_field}.policy[{i}]",
                          "is not one of placement.policy")
