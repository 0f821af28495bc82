"""Arrow schemas of fleetcast's canonical tables and of its outputs, with every column's
description.

Times are integer microseconds from the trace start (Google v3 convention; a value below
zero means "before the trace started"). Resources are in the trace's own units: normalized
machine fractions for Google v3, cores and GB for Azure V1, machine fractions for the Azure
packing trace.

Every table that fleetcast writes is declared here, once, so that the Parquet and the
BigQuery sinks, the notebooks and the tests agree on names and types. Every column is
declared with `column(name, type, description)`: the description (units included) is the
one source of the README's table reference (scripts/gen_table_docs.py), the Parquet files'
field metadata and the BigQuery schemas' field descriptions; `table(description, columns)`
describes a whole table the same way.
"""

from typing import Sequence

import pyarrow as pa

# The metadata key of a column's or a table's description (Arrow field / schema metadata).
DESCRIPTION = b"description"


def column(name: str, type_: pa.DataType, description: str,
           nullable: bool = True) -> pa.Field:
    """A table column carrying its description (units included)."""
    return pa.field(name, type_, nullable=nullable, metadata={DESCRIPTION: description})


def table(description: str, columns: Sequence[pa.Field]) -> pa.Schema:
    """A table's schema carrying its description (what one row is)."""
    return pa.schema(columns, metadata={DESCRIPTION: description})


def description(item) -> str:
    """The description of a column (pa.Field) or a table (pa.Schema); "" when it has none."""
    return (item.metadata or {}).get(DESCRIPTION, b"").decode("utf-8")


# Google v3 cpu_usage_distribution holds the 0th, 10th, ..., 100th percentiles and
# tail_cpu_usage_distribution the 91st ... 99th.
CPU_DISTRIBUTION_PERCENTILES = tuple(range(0, 101, 10))
TAIL_CPU_DISTRIBUTION_PERCENTILES = tuple(range(91, 100))

_TIME = "µs from the trace start"
_MACHINE_ID = column("machine_id", pa.int64(), "the machine's id in the trace")
_POOL = column("pool", pa.string(),
               "the placement pool (cluster / cell) the machine or instance belongs to")
_PRIORITY = column("priority", pa.int64(), "the instance's priority (Google v3; null for Azure)")
_SCHEDULING_CLASS = column("scheduling_class", pa.int64(),
                           "latency sensitivity 0-3 (Google v3; null for Azure)")
_COLLECTION_TYPE = column("collection_type", pa.int64(), "0 = job, 1 = alloc set (Google v3)")
_ALLOC_COLLECTION_ID = column("alloc_collection_id", pa.int64(),
                              "the alloc set the instance runs in (Google v3; null if none)")

MACHINES = table("one row per machine event; capacity as first seen, updates as extra rows", [
    column("machine_id", pa.int64(), "the machine's id in the trace", nullable=False),
    column("time", pa.int64(), f"when the event happened, {_TIME}", nullable=False),
    column("event_type", pa.string(), "ADD, REMOVE or UPDATE"),
    column("cpu_capacity", pa.float64(), "CPU capacity, in the trace's CPU units"),
    column("memory_capacity", pa.float64(), "memory capacity, in the trace's memory units"),
    column("platform_id", pa.string(), "the machine's hardware platform (Google v3)"),
    _POOL,
])

INSTANCES = table("one row per run of a task or VM", [
    column("instance_id", pa.string(),
           "the task or VM: \"collection_id:instance_index\" for Google v3, the VM id for "
           "Azure; a rescheduled task has one row per run, (instance_id, start_time) is unique",
           nullable=False),
    column("collection_id", pa.int64(), "the job or alloc set (Google v3)"),
    column("instance_index", pa.int64(), "the task's index in its collection (Google v3)"),
    column("machine_id", pa.int64(), "the machine the run was scheduled on"),
    _POOL,
    column("start_time", pa.int64(), f"when the run started, {_TIME}", nullable=False),
    column("end_time", pa.int64(),
           f"when the run ended, {_TIME}; null: still running at trace end (censored)"),
    column("end_type", pa.string(),
           "FINISH, KILL, FAIL, EVICT or LOST (Google v3), DELETED (Azure); null when censored"),
    column("cpu_request", pa.float64(), "requested CPU, in the trace's CPU units"),
    column("memory_request", pa.float64(), "requested memory, in the trace's memory units"),
    _PRIORITY,
    _SCHEDULING_CLASS,
    _COLLECTION_TYPE,
    column("user", pa.string(), "the submitting user, hashed (Google v3)"),
    column("collection_logical_name", pa.string(), "the job's logical name, hashed (Google v3)"),
    column("collection_name", pa.string(), "the job's name, hashed (Google v3)"),
    _ALLOC_COLLECTION_ID,
    column("alloc_instance_index", pa.int64(), "the alloc instance it runs in (Google v3)"),
    column("vertical_scaling", pa.int64(), "the vertical-scaling setting (Google v3)"),
    column("scheduler", pa.int64(), "0 = default scheduler, 1 = batch scheduler (Google v3)"),
    column("parent_collection_id", pa.int64(), "the parent job, if any (Google v3)"),
    column("subscription_id", pa.string(), "the Azure subscription (null for Google v3)"),
    column("deployment_id", pa.string(), "the Azure deployment (null for Google v3)"),
    column("vm_category", pa.string(),
           "Azure VM category: Delay-insensitive, Interactive or Unknown"),
    column("deployment_size", pa.int64(), "VMs in the Azure deployment (null for Google v3)"),
])

USAGE = table("one row per instance and 5-minute usage window, with the request in force at "
              "the window start", [
    column("machine_id", pa.int64(), "the machine the instance ran on"),
    column("instance_id", pa.string(), "the task or VM (as in instances)", nullable=False),
    column("start_time", pa.int64(), f"window start, {_TIME}", nullable=False),
    column("end_time", pa.int64(), f"window end, {_TIME}", nullable=False),
    column("cpu_limit", pa.float64(),
           "CPU request in force at the window start (latest instance event at or before it "
           "with cpus > 0 and memory > 0), trace CPU units", nullable=False),
    column("memory_limit", pa.float64(),
           "memory request in force at the window start, trace memory units", nullable=False),
    column("avg_cpu", pa.float64(), "mean CPU usage over the window, trace CPU units"),
    column("max_cpu", pa.float64(), "peak CPU usage in the window, trace CPU units"),
    column("cpu_usage_distribution", pa.list_(pa.float64()),
           "CPU usage percentiles 0, 10, ..., 100 over the window, trace CPU units"),
    column("tail_cpu_usage_distribution", pa.list_(pa.float64()),
           "CPU usage percentiles 91 ... 99 over the window, trace CPU units"),
    column("avg_memory", pa.float64(), "mean memory usage, trace memory units"),
    column("max_memory", pa.float64(), "peak memory usage, trace memory units"),
    _PRIORITY,
    _SCHEDULING_CLASS,
    _COLLECTION_TYPE,
    _ALLOC_COLLECTION_ID,
])

DEAD_LETTERS = table("one row per rejected input row, with why", [
    column("source", pa.string(), "the source or stage that rejected it (google_v3, "
           "placement, ...)", nullable=False),
    column("table", pa.string(), "the table the row came from", nullable=False),
    column("reason", pa.string(), "why it was rejected", nullable=False),
    column("raw", pa.string(), "the rejected row as the source gave it (a JSON object, or the "
           "CSV line)"),
])

SOURCE_COUNTS = table("one row per source table: rows read, kept and rejected", [
    column("source", pa.string(), "the trace source (google_v3, azure_v1, ...)",
           nullable=False),
    column("table", pa.string(), "the source's table", nullable=False),
    column("read", pa.int64(), "rows read (rows)", nullable=False),
    column("kept", pa.int64(), "rows that passed validation (rows)", nullable=False),
    column("rejected", pa.int64(), "rows sent to dead_letters (rows)", nullable=False),
])

# Lifetime stage (pipelines/stages/lifetime/). Models are named as in its registry
# (predictors/lifetime/registry.py); times in µs, durations in seconds.
_INSTANCE_KEY = ("(instance_id, start_time) is the instance's key in instances, whose "
                 "columns the model's features are derived from")
LIFETIME_EXAMPLES = table("one row per uptime-augmented training or test example", [
    column("instance_id", pa.string(), f"the instance; {_INSTANCE_KEY}", nullable=False),
    column("start_time", pa.int64(), f"the instance's start, {_TIME}", nullable=False),
    column("split", pa.string(), "\"train\" (observed until the split time, what the "
           "regressors trained on) or \"test\" (observed until the trace end)", nullable=False),
    column("uptime_s", pa.float64(), "the uptime the example is taken at, s: an age of the "
           "uptime_age_s grid (ABSOLUTE_AGES) or a fraction of the lifetime "
           "(LIFETIME_FRACTIONS)", nullable=False),
    column("log10_remaining_s", pa.float64(), "the label: log10 of the remaining lifetime in "
           "s, clipped to [min_remaining_s, cap]", nullable=False),
    column("censored", pa.bool_(), "from an instance still running at its observation end "
           "(its label is the cap)", nullable=False),
])

_SPLIT_TIME = column("split_time_us", pa.int64(), f"the train/test split time, {_TIME}")
LIFETIME_SPLIT = table(
    "one row per group of valid instances: \"train\" (training-period instances that started "
    "at least lifetime_cap_s before the split: the regressors' examples), \"train_recent\" "
    "(later training-period ones: Kaplan-Meier and the LA classifier only), \"test\", and "
    "\"started_before_trace\" (unknown lifetimes, no examples)", [
        column("split", pa.string(), "the group", nullable=False),
        column("instances", pa.int64(), "instances in the group", nullable=False),
        column("finished", pa.int64(), "of which ended within the observation",
               nullable=False),
        column("censored", pa.int64(), "of which were still running at the observation end",
               nullable=False),
        column("examples", pa.int64(), "uptime-augmented examples of the group",
               nullable=False),
        _SPLIT_TIME,
        column("observation_end_us", pa.int64(),
               f"censored instances of the group were observed until this time, {_TIME}"),
    ])

_AUGMENTATION = column(
    "augmentation", pa.string(),
    "where the model's training examples sit: ABSOLUTE_AGES (ages of the uptime_age_s grid) "
    "or LIFETIME_FRACTIONS (fractions of each lifetime, the paper's); null for models "
    "without uptime examples (Kaplan-Meier, LA classifier)")
LIFETIME_MODELS = table("one row per trained lifetime model", [
    column("name", pa.string(), "the model: uptime, no_uptime, uptime_lifetime_fractions, "
           "kaplan_meier, la_classifier, uptime_long_lived, or LAVA's class classifiers "
           "lava_class_1h, lava_class_10h and lava_class_100h", nullable=False),
    column("kind", pa.string(), "the model class's KIND (uptime_lifetime_model, "
           "la_classifier, kaplan_meier, uptime_long_lived_classifier)", nullable=False),
    column("path", pa.string(), "directory of the model's files; "
           "pipelines.stages.lifetime.load_model(path) loads it", nullable=False),
    column("features", pa.list_(pa.string()), "the instance columns the model uses"),
    column("train_instances", pa.int64(), "instances trained on", nullable=False),
    column("train_examples", pa.int64(), "uptime-augmented examples trained on (instances "
           "for the classifier and Kaplan-Meier)", nullable=False),
    column("num_trees", pa.int64(), "boosting rounds kept after early stopping (null for "
           "Kaplan-Meier)"),
    column("split_time_us", pa.int64(), f"the train/test split time, {_TIME}",
           nullable=False),
    column("format_version", pa.int64(), "version of the model's file format",
           nullable=False),
    _AUGMENTATION,
])

_TARGET_RECALL = column(
    "target_recall", pa.float64(),
    "the recall of long-lived VMs on a validation slice of the training period (its "
    "latest-starting validation_fraction) that chose the decision threshold, 0-1; NaN when "
    "the decision is fixed (long_lived_decision_s set, la_target_recall 0)")

_CLASSIFICATION_FIELDS = [
    column("model", pa.string(), "the lifetime model (see lifetime_models.name)",
           nullable=False),
    column("n", pa.int64(), "test instances whose class is known", nullable=False),
    column("n_positive", pa.int64(), "of which long-lived", nullable=False),
    column("threshold_s", pa.float64(), "long-lived means living beyond this, s",
           nullable=False),
    column("decision_threshold", pa.float64(), "predicted positive at or above this score: a "
           "predicted lifetime in s for the regressors (chosen on validation data for "
           "target_recall, or long_lived_decision_s), a probability 0-1 for the LA classifier "
           "(chosen at fit time for la_target_recall) and for uptime_long_lived (chosen on "
           "validation data for target_recall)", nullable=False),
    column("precision", pa.float64(), "precision of \"long-lived\" at the decision, 0-1"),
    column("recall", pa.float64(), "recall of \"long-lived\" at the decision, 0-1"),
    column("f1", pa.float64(), "F1 of \"long-lived\" at the decision, 0-1"),
    column("auc", pa.float64(), "ROC AUC of the score, 0-1; NaN when the instances lack one "
           "of the classes"),
    column("average_precision", pa.float64(), "average precision of the score, 0-1"),
    column("precision_at_recall_70", pa.float64(), "best precision at recall ≥ 0.70, 0-1"),
    column("precision_at_recall_75", pa.float64(), "best precision at recall ≥ 0.75, 0-1"),
    column("precision_at_recall_80", pa.float64(), "best precision at recall ≥ 0.80, 0-1"),
    column("precision_at_recall_85", pa.float64(), "best precision at recall ≥ 0.85, 0-1"),
]

LIFETIME_LONG_LIVED = table(
    "one row per remaining-lifetime model and uptime_long_lived: \"lives beyond "
    "long_lived_threshold_s\" from the prediction at arrival (001 §3, Table 4)",
    _CLASSIFICATION_FIELDS + [_TARGET_RECALL, _AUGMENTATION])

LIFETIME_LA_CLASSIFIER = table("one row per classifier asked at arrival: LA's 2-hour one "
                               "(003 Tables 1 and 3) and LAVA's class classifiers "
                               "(threshold_s 1 h, 10 h, 100 h)",
                               _CLASSIFICATION_FIELDS + [_TARGET_RECALL])

_CLASSIFICATION = {f.name: f for f in _CLASSIFICATION_FIELDS}
LIFETIME_F1_BY_AGE = table(
    "one row per (model, absolute uptime): \"lives beyond long_lived_threshold_s\" "
    "repredicted for the test instances alive at uptime_s, scored by uptime + predicted "
    "remaining (by P(lifetime > threshold_s | uptime) for uptime_long_lived, whose predicted "
    "remaining columns are NaN); no lifetime leaks in",
    [_CLASSIFICATION["model"], _AUGMENTATION,
     column("uptime_s", pa.float64(), "the uptime of the uptime_age_s grid, s",
            nullable=False)]
    + [_CLASSIFICATION["n"].with_metadata(
        {DESCRIPTION: "test instances alive at uptime_s whose class is known"})]
    + [_CLASSIFICATION[name] for name in ("n_positive", "threshold_s", "decision_threshold")]
    + [_TARGET_RECALL]
    + [_CLASSIFICATION[name] for name in ("precision", "recall", "f1", "auc",
                                           "average_precision", "precision_at_recall_70")]
    + [
        column("max_predicted_remaining_s", pa.float64(), "largest predicted remaining "
               "lifetime of the instances alive at uptime_s, s; NaN when none is"),
        column("median_predicted_remaining_s", pa.float64(), "median predicted remaining "
               "lifetime of the instances alive at uptime_s, s; NaN when none is"),
    ])

LIFETIME_F1_BY_UPTIME = table(
    "one row per (model, uptime quantile): F1 of \"lives beyond the threshold\" repredicted at "
    "uptime quantile/num_quantiles of the true lifetime, finished test instances (001 Fig. 9; "
    "leaks the lifetime: lifetime_f1_by_age is the view without the leak)", [
        column("model", pa.string(), "the lifetime model", nullable=False),
        column("quantile", pa.int64(), "q: the uptime is q / num_uptime_quantiles of the "
               "true lifetime", nullable=False),
        column("uptime_fraction", pa.float64(), "the uptime as a fraction of the true "
               "lifetime, 0-1", nullable=False),
        column("n", pa.int64(), "finished test instances scored", nullable=False),
        column("precision", pa.float64(), "precision of \"long-lived\", 0-1"),
        column("recall", pa.float64(), "recall of \"long-lived\", 0-1"),
        column("f1", pa.float64(), "F1 of \"long-lived\", 0-1"),
        column("decision_threshold_s", pa.float64(), "called long at a predicted lifetime "
               "(uptime + remaining) at or above this, s: long_lived_decision_s, else "
               "threshold_s"),
        column("leaks_lifetime", pa.bool_(), "always true: the uptime is a fraction of the "
               "true lifetime"),
        _AUGMENTATION,
    ])

LIFETIME_ERROR_HISTOGRAM = table(
    "one row per (model, error bin): |log10 predicted − log10 true remaining lifetime| at "
    "arrival only (\"initial\") and with every reprediction (001 App. C, Fig. 12)", [
        column("model", pa.string(), "the lifetime model", nullable=False),
        column("error_lower", pa.float64(), "the bin's lower edge, decades (log10 units)",
               nullable=False),
        column("error_upper", pa.float64(), "the bin's upper edge (exclusive), decades; +inf "
               "for the last bin", nullable=False),
        column("initial_count", pa.int64(), "predictions at arrival in the bin",
               nullable=False),
        column("initial_fraction", pa.float64(), "their share of all predictions at arrival, "
               "0-1", nullable=False),
        column("with_repredictions_count", pa.int64(), "predictions at every uptime quantile "
               "in the bin", nullable=False),
        column("with_repredictions_fraction", pa.float64(), "their share of all those "
               "predictions, 0-1", nullable=False),
        _AUGMENTATION,
    ])

LIFETIME_CONCORDANCE = table(
    "one row per model: Harrell's C-index of the lifetime predicted at arrival, all test "
    "instances with their censoring (001 Table 4)", [
        column("model", pa.string(), "the lifetime model", nullable=False),
        column("n", pa.int64(), "test instances", nullable=False),
        column("c_index", pa.float64(), "Harrell's C-index, 0-1 (0.5 = chance)"),
    ])

LIFETIME_TABLES = {
    "lifetime_examples": LIFETIME_EXAMPLES,
    "lifetime_split": LIFETIME_SPLIT,
    "lifetime_models": LIFETIME_MODELS,
    "lifetime_long_lived": LIFETIME_LONG_LIVED,
    "lifetime_la_classifier": LIFETIME_LA_CLASSIFIER,
    "lifetime_f1_by_age": LIFETIME_F1_BY_AGE,
    "lifetime_f1_by_uptime": LIFETIME_F1_BY_UPTIME,
    "lifetime_error_histogram": LIFETIME_ERROR_HISTOGRAM,
    "lifetime_concordance": LIFETIME_CONCORDANCE,
}

# Overcommit stage (pipelines/stages/overcommit/; paper 004 §3-5). `predictor` is a fortune
# teller's name (oracles included); times are µs on the stage's grid, after reset_and_shift;
# machine_id is the simulated machine (the trace's, or 0..N-1 with scheduler.at_random);
# usage and limits are in the configured metric's units.
_GRID_TIME = "µs on the stage's 5-minute grid (after reset_and_shift)"
_METRIC_UNITS = "in the configured metric's units (e.g. p90 CPU, trace CPU units)"
_PREDICTOR = column("predictor", pa.string(), "the fortune teller's configured name "
                    "(oracles included)", nullable=False)
_SCORING_ORACLE = column("oracle", pa.string(), "the oracle teller it is scored against (the "
                         "config's first oracle)", nullable=False)
_SIM_MACHINE = column("machine_id", pa.int64(), "the simulated machine (the trace's, or "
                      "0..N-1 with scheduler.at_random)", nullable=False)
OVERCOMMIT_SCHEDULED_USAGE = table("one row per (machine, task, grid time) sample", [
    _SIM_MACHINE,
    column("instance_id", pa.string(), "the task (as in instances)", nullable=False),
    column("time", pa.int64(), f"the sample's time, {_GRID_TIME}", nullable=False),
    column("usage", pa.float64(), f"the task's usage, {_METRIC_UNITS}", nullable=False),
    column("limit", pa.float64(), f"the task's limit (request), {_METRIC_UNITS}",
           nullable=False),
])

OVERCOMMIT_TIMESERIES = table("one row per (predictor, machine, grid time)", [
    _PREDICTOR,
    _SIM_MACHINE,
    column("time", pa.int64(), _GRID_TIME, nullable=False),
    column("num_tasks", pa.int64(), "tasks with a sample on the machine then",
           nullable=False),
    column("total_usage", pa.float64(), f"sum of the tasks' usage, each capped at its limit "
           f"(as the paper's reference does), {_METRIC_UNITS}", nullable=False),
    column("total_limit", pa.float64(), f"sum of the tasks' limits, {_METRIC_UNITS}",
           nullable=False),
    column("predicted_peak", pa.float64(), f"the peak the teller advertises, {_METRIC_UNITS}; "
           "NaN where it advertises nothing (an oracle over the last horizon)"),
    column("oracle", pa.float64(), f"the scoring oracle's peak, {_METRIC_UNITS}; NaN where it "
           "has no value"),
])

OVERCOMMIT_MACHINE_METRICS = table(
    "one row per (predictor, machine), averaged over its scored steps (predicted and oracle "
    "both known; paper 004 §5.1.3); NaN metrics when no step is scored", [
        _PREDICTOR,
        _SCORING_ORACLE,
        _SIM_MACHINE,
        column("num_steps", pa.int64(), "grid steps of the machine", nullable=False),
        column("scored_steps", pa.int64(), "steps where the prediction and the oracle are "
               "both known", nullable=False),
        column("violation_rate", pa.float64(), "share of scored steps where the predicted "
               "peak is below the oracle's, 0-1"),
        column("violation_severity", pa.float64(), "mean over the scored steps of "
               "max(0, oracle − predicted) / oracle (0 without a violation), 0-1"),
        column("savings_ratio", pa.float64(), "mean (total limit − predicted peak) / total "
               "limit, 0-1: the capacity the prediction frees"),
    ])

OVERCOMMIT_CELL_METRICS = table(
    "one row per (predictor, grid time): the cell (all machines of the run), sums over the "
    "machines scored then", [
        _PREDICTOR,
        _SCORING_ORACLE,
        column("time", pa.int64(), _GRID_TIME, nullable=False),
        column("num_machines", pa.int64(), "machines scored at this time", nullable=False),
        column("total_limit", pa.float64(), f"sum of their limits, {_METRIC_UNITS}",
               nullable=False),
        column("predicted_peak", pa.float64(), f"sum of their predicted peaks, "
               f"{_METRIC_UNITS}", nullable=False),
        column("oracle_peak", pa.float64(), f"sum of their oracle peaks, {_METRIC_UNITS}",
               nullable=False),
        column("savings_ratio", pa.float64(), "(total_limit − predicted_peak) / total_limit, "
               "0-1"),
    ])

_QUANTILE = "quantile of the metric's distribution (its units)"
OVERCOMMIT_SUMMARY = table(
    "one row per (predictor, metric): mean and CDF quantiles of violation_rate, "
    "violation_severity and savings_ratio over machines, and of cell_savings_ratio over the "
    "cell's times", [
        _PREDICTOR,
        _SCORING_ORACLE,
        column("metric", pa.string(), "violation_rate, violation_severity, savings_ratio or "
               "cell_savings_ratio", nullable=False),
        column("n", pa.int64(), "values summarised (machines, or cell times)",
               nullable=False),
        column("mean", pa.float64(), "mean of the metric (its units, 0-1)"),
        *[column(f"p{q}", pa.float64(), f"{q}th percentile of the metric (its units, 0-1)")
          for q in (10, 25, 50, 75, 90, 95, 99)],
    ])

OVERCOMMIT_COUNTS = table(
    "one row per overcommit step: rows in and out, read = kept + filtered + rejected", [
        column("step", pa.string(), "filter, metric, reset_and_shift, scheduler or samples",
               nullable=False),
        column("read", pa.int64(), "rows the step read", nullable=False),
        column("kept", pa.int64(), "rows it passed on", nullable=False),
        column("filtered", pa.int64(), "rows left out by the configuration", nullable=False),
        column("rejected", pa.int64(), "rows sent to dead_letters, with their reasons",
               nullable=False),
    ])

OVERCOMMIT_TABLES = {
    "overcommit_scheduled_usage": OVERCOMMIT_SCHEDULED_USAGE,
    "overcommit_timeseries": OVERCOMMIT_TIMESERIES,
    "overcommit_machine_metrics": OVERCOMMIT_MACHINE_METRICS,
    "overcommit_cell_metrics": OVERCOMMIT_CELL_METRICS,
    "overcommit_summary": OVERCOMMIT_SUMMARY,
    "overcommit_counts": OVERCOMMIT_COUNTS,
}

# Placement stage (pipelines/stages/placement/; policies/replay/metrics.py defines every
# metric). One replay per (pool, policy, lifetime_source, defrag). Percentages are 0-100;
# `time` is trace µs.
_REPLAY_KEY_FIELDS = [
    column("pool", pa.string(), "the replayed pool", nullable=False),
    column("policy", pa.string(), "the placement policy (registry name or plug-in name)",
           nullable=False),
    column("lifetime_source", pa.string(), "the lifetimes the policy sees: oracle, "
           "noisy_oracle_<accuracy> (noisy_oracle_<accuracy>_seed<seed> with a seed of its "
           "own), uptime_model, one_shot_model or uptime_model_lava_classes (LAVA only)",
           nullable=False),
    column("noisy_oracle_accuracy", pa.float64(), "the noisy oracle's accuracy, 0-1 (null for "
           "other sources), for accuracy sweeps"),
    column("noisy_oracle_seed", pa.int64(), "the seed of the noisy oracle's per-VM draws "
           "(placement.seed unless the source sets one; null for other sources)"),
    column("defrag", pa.string(), "none, lars_lifetime or lars_baseline", nullable=False),
]
PLACEMENT_PCT_METRICS = ("empty_hosts_pct", "upper_bound_empty_hosts_pct",
                         "packing_density_pct", "empty_to_free_ratio_pct",
                         "cpu_allocated_pct", "memory_allocated_pct", "stranded_cpu_pct",
                         "stranded_memory_pct")
_PCT_DESCRIPTIONS = {
    "empty_hosts_pct": "hosts with no VM, % of the pool's hosts",
    "upper_bound_empty_hosts_pct": "the most hosts that could be empty given the demand "
                                   "placed, % of hosts (001 App. G.2; differs per replay)",
    "packing_density_pct": "allocated CPU / CPU capacity of the hosts in use, % (003 §4.2)",
    "empty_to_free_ratio_pct": "CPU capacity of empty hosts / all free CPU, % (001 App. D)",
    "cpu_allocated_pct": "allocated CPU / the pool's CPU, %",
    "memory_allocated_pct": "allocated memory / the pool's memory, %",
    "stranded_cpu_pct": "CPU left free after inflating the pool with the VM shape mix until "
                        "none fits, % of the pool's CPU",
    "stranded_memory_pct": "memory left free after inflating the pool with the VM shape mix "
                           "until none fits, % of the pool's memory",
}
PLACEMENT_TIMESERIES = table("one row per (replay, metric sample time)", _REPLAY_KEY_FIELDS + [
    column("time", pa.int64(), f"the sample time, {_TIME}", nullable=False),
    column("empty_hosts", pa.int64(), "hosts with no VM", nullable=False),
    *[column(name, pa.float64(), _PCT_DESCRIPTIONS[name]) for name in PLACEMENT_PCT_METRICS],
    column("live_vms", pa.int64(), "VMs running on the pool", nullable=False),
    column("placements", pa.int64(), "VMs placed since the end of the warm-up",
           nullable=False),
    column("failed_placements", pa.int64(), "arrivals no host could take since the end of "
           "the warm-up", nullable=False),
    column("migrations", pa.int64(), "LARS migrations since the end of the warm-up",
           nullable=False),
])
# Metrics whose difference vs the pool's Best-Fit replay (same lifetime source, no
# defragmentation) the summary gives in percentage points, as <metric>_vs_best_fit_pp.
PLACEMENT_BASELINE_METRICS = ("empty_hosts_pct", "packing_density_pct",
                              "empty_to_free_ratio_pct", "stranded_cpu_pct",
                              "stranded_memory_pct")
_LARS = ("LARS over the whole replay (null without defragmentation; policies/lars.py, 001 "
         "Table 2)")
PLACEMENT_SUMMARY = table(
    "one row per replay (pool, policy, lifetime source, defragmentation): means over the "
    "metric window, and differences vs the pool's Best-Fit replay. LARS is paired: "
    "lars_lifetime decides which hosts to drain and when; each lars_baseline row (one per "
    "seed) replays the migration queue of exactly those drains in a random order and repeats "
    "lars_lifetime's pool columns. lars_scheduled_migrations = lars_migrations + "
    "lars_saved_migrations + lars_failed_migrations + VMs still queued at the end",
    _REPLAY_KEY_FIELDS + [
        column("num_hosts", pa.int64(), "hosts in the pool", nullable=False),
        column("vms", pa.int64(), "VMs of the pool kept for the replay = placed_vms + "
               "failed_vms + not_replayed_vms (warm-up VMs included)", nullable=False),
        column("placed_vms", pa.int64(), "VMs placed on a host", nullable=False),
        column("failed_vms", pa.int64(), "VMs no host could take (warm-up included)",
               nullable=False),
        column("not_replayed_vms", pa.int64(), "VMs outside the replay window",
               nullable=False),
        column("warmup_vms", pa.int64(), "VMs alive at the replay start, placed by Best-Fit "
               "first (001 App. F)", nullable=False),
        column("warmup_failed", pa.int64(), "warm-up VMs that did not fit", nullable=False),
        column("warm_start", pa.string(), "who placed the arrivals before the metrics start: "
               "policy_from_start (the policy under test) or best_fit_until_metrics "
               "(Best-Fit, then the policy takes over the pool as it is)", nullable=False),
        column("warm_start_vms", pa.int64(), "arrivals placed or failed by Best-Fit before "
               "the take-over (0 with policy_from_start)", nullable=False),
        column("placements", pa.int64(), "VMs placed since the end of the warm-up",
               nullable=False),
        column("failed_placements", pa.int64(), "arrivals no host could take since the end "
               "of the warm-up", nullable=False),
        column("migrations", pa.int64(), "migrations in the metric window", nullable=False),
        column("num_samples", pa.int64(), "metric samples averaged", nullable=False),
        *[column(name, pa.float64(), f"mean over the samples: {_PCT_DESCRIPTIONS[name]}"
                 + (" (samples with inflation)" if name.startswith("stranded") else ""))
          for name in PLACEMENT_PCT_METRICS],
        column("gap_to_upper_bound_pp", pa.float64(), "upper_bound_empty_hosts_pct − "
               "empty_hosts_pct, percentage points (001 App. G.2)"),
        *[column(f"{name}_vs_best_fit_pp", pa.float64(), f"{name} minus Best-Fit's (same "
                 "pool and lifetime source, no defragmentation), percentage points")
          for name in PLACEMENT_BASELINE_METRICS],
        column("lars_migrations", pa.int64(), f"migrations performed; {_LARS}"),
        column("lars_scheduled_migrations", pa.int64(), "VMs on the drained hosts at drain "
               f"time; {_LARS}"),
        column("lars_saved_migrations", pa.int64(), "scheduled VMs that exited before their "
               f"turn; {_LARS}"),
        column("lars_failed_migrations", pa.int64(), "scheduled VMs no target host fit (the "
               f"baseline rows count the same VMs); {_LARS}"),
        column("lars_drained_hosts", pa.int64(), "drain decisions (a host counts each time it "
               f"is picked); {_LARS}"),
        column("lars_seed", pa.int64(), "the baseline order's seed index, 0 .. "
               "lars.baseline_seeds − 1 (null otherwise; placement_timeseries has no "
               "lars_baseline rows)"),
        column("predictions", pa.int64(), "repredictions of a repredicting lifetime source "
               "(null otherwise)"),
        column("prediction_batches", pa.int64(), "batched model calls of those repredictions "
               "(null otherwise)"),
    ])
PLACEMENT_TABLES = {
    "placement_timeseries": PLACEMENT_TIMESERIES,
    "placement_summary": PLACEMENT_SUMMARY,
}

# Resource shaping (pipelines/stages/shaping/, shaping/; paper 002 §III-B, §IV). A run is
# one simulation: (forecaster, k1, k2, policy, seed); the baseline's forecaster is "none" and
# its k1, k2 are null.
_SHAPING_KEY = [
    column("forecaster", pa.string(), "oracle, arima, gaussian_process, or none (baseline)",
           nullable=False),
    column("k1", pa.float64(), "beta's static part, a fraction of the request (null for the "
           "baseline)"),
    column("k2", pa.float64(), "beta's weight of the forecast uncertainty (null for the "
           "baseline)"),
    column("policy", pa.string(), "baseline, optimistic or pessimistic", nullable=False),
]
_SEED = column("seed", pa.int64(), "the run's seed (elastic marking, sampled workload, "
               "overload victims' order)", nullable=False)
SHAPING_APPLICATION_COLUMNS = [
    column("submit_s", pa.float64(), "submission, seconds from the first submission",
           nullable=False),
    column("runtime_s", pa.float64(), "runtime without interruption (longest core "
           "component), seconds", nullable=False),
    column("components", pa.int64(), "components (instances)", nullable=False),
    column("finished", pa.bool_(), "finished before the simulation ended", nullable=False),
    column("turnaround_s", pa.float64(), "submission to finish incl. queueing and "
           "resubmissions, seconds (null if unfinished)"),
    column("wait_s", pa.float64(), "submission to first admission, seconds (null if never "
           "admitted)"),
    column("cpu_slack_pct", pa.float64(), "100 · (allocated − used) / allocated CPU over "
           "the application's component-steps"),
    column("memory_slack_pct", pa.float64(), "the same for memory (null when CPU only)"),
    column("failures", pa.int64(), "times the application failed (a core component killed "
           "by its overloaded host, or under COMPONENT_LIMIT for using more than its own "
           "allocation)", nullable=False),
    column("preemptions", pa.int64(), "times the pessimistic shaper preempted it fully",
           nullable=False),
    column("failed_components", pa.int64(), "components killed by overloaded hosts or "
           "(COMPONENT_LIMIT) over their own allocations; those of failed applications "
           "included", nullable=False),
    column("preempted_components", pa.int64(), "components preempted by the shaper (those "
           "of fully preempted applications included)", nullable=False),
    column("work_lost_s", pa.float64(), "component-seconds of work lost to kills and "
           "preemptions", nullable=False),
]
SHAPING_APPLICATIONS = table(
    "one row per application of every shaping run (002 §IV-A metrics)",
    _SHAPING_KEY + [_SEED, column("app_id", pa.int64(), "the trace's collection id (a VM "
                                  "without one: negative; sampled workloads: 0 .. n − 1)",
                                  nullable=False)] + SHAPING_APPLICATION_COLUMNS)
SHAPING_RUNS = table("one row per shaping simulation", _SHAPING_KEY + [
    _SEED,
    column("hosts", pa.int64(), "hosts of the cluster", nullable=False),
    column("applications", pa.int64(), "applications in the workload", nullable=False),
    column("finished_applications", pa.int64(), "applications finished", nullable=False),
    column("components", pa.int64(), "components in the workload", nullable=False),
    column("steps", pa.int64(), "simulated steps", nullable=False),
    column("component_steps", pa.int64(), "running component-steps simulated",
           nullable=False),
    column("shaping_steps", pa.int64(), "shaping steps (policy calls)", nullable=False),
    column("preempting_shaping_steps", pa.int64(), "shaping steps that preempted something",
           nullable=False),
    column("forecast_fits", pa.int64(), "forecasting models fitted for the run's forecaster "
           "(shared by every run of that forecaster)", nullable=False),
    column("mean_turnaround_s", pa.float64(), "mean turnaround of the finished "
           "applications, seconds"),
    column("median_turnaround_s", pa.float64(), "median of the same, seconds"),
    column("turnaround_speedup_vs_baseline", pa.float64(), "the baseline's mean turnaround "
           "(same seed) / this run's: 002 Fig. 3's turnaround ratio, > 1 is better"),
    column("mean_cpu_slack_pct", pa.float64(), "mean over applications of cpu_slack_pct"),
    column("mean_memory_slack_pct", pa.float64(), "mean over applications of "
           "memory_slack_pct"),
    column("failed_applications_pct", pa.float64(), "applications that failed at least once, "
           "% (002: optimistic 37.67 % with the oracle)", nullable=False),
    column("preempted_applications_pct", pa.float64(), "applications preempted fully at "
           "least once, %", nullable=False),
    column("failed_components", pa.int64(), "components killed by overloaded hosts or "
           "(COMPONENT_LIMIT) over their own allocations", nullable=False),
    column("preempted_components", pa.int64(), "components preempted by the shaper",
           nullable=False),
    column("work_lost_s", pa.float64(), "component-seconds of work lost", nullable=False),
])
SHAPING_SUMMARY = table(
    "distributions per (forecaster, k1, k2, policy) over its seeds: application metrics "
    "pooled over every run, run metrics over the runs", _SHAPING_KEY + [
        column("metric", pa.string(), "a shaping_applications column (turnaround_s, wait_s, "
               "cpu_slack_pct, memory_slack_pct, work_lost_s) or a shaping_runs one "
               "(failed_applications_pct, turnaround_speedup_vs_baseline, …)",
               nullable=False),
        column("n", pa.int64(), "values (applications or runs)", nullable=False),
        column("mean", pa.float64(), "mean"),
        *[column(f"p{q}", pa.float64(), f"{q}th percentile") for q in (10, 25, 50, 75, 90,
                                                                       95, 99)],
    ])
SHAPING_TABLES = {
    "shaping_runs": SHAPING_RUNS,
    "shaping_applications": SHAPING_APPLICATIONS,
    "shaping_summary": SHAPING_SUMMARY,
}

CANONICAL = {"machines": MACHINES, "instances": INSTANCES, "usage": USAGE}

# Every table a run may write, by its output name. Later stages register theirs here.
TABLES = {
    **CANONICAL,
    "dead_letters": DEAD_LETTERS,
    "source_counts": SOURCE_COUNTS,
    **LIFETIME_TABLES,
    **OVERCOMMIT_TABLES,
    **PLACEMENT_TABLES,
    **SHAPING_TABLES,
}


def empty_table(schema: pa.Schema) -> pa.Table:
    """A zero-row table of `schema`."""
    return schema.empty_table()
