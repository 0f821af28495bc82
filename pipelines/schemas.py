"""Arrow schemas of fleetcast's canonical tables and of its outputs.

Times are integer microseconds from the trace start (Google v3 convention; a value below
zero means "before the trace started"). Resources are in the trace's own units: normalized
machine fractions for Google v3, cores and GB for Azure V1, machine fractions for the Azure
packing trace.

Every table that fleetcast writes is declared here, once, so that the Parquet and the
BigQuery sinks, the notebooks and the tests agree on names and types.
"""

import pyarrow as pa

# Google v3 cpu_usage_distribution holds the 0th, 10th, ..., 100th percentiles and
# tail_cpu_usage_distribution the 91st ... 99th.
CPU_DISTRIBUTION_PERCENTILES = tuple(range(0, 101, 10))
TAIL_CPU_DISTRIBUTION_PERCENTILES = tuple(range(91, 100))

MACHINES = pa.schema([
    pa.field("machine_id", pa.int64(), nullable=False),
    pa.field("time", pa.int64(), nullable=False),
    pa.field("event_type", pa.string()),
    pa.field("cpu_capacity", pa.float64()),
    pa.field("memory_capacity", pa.float64()),
    pa.field("platform_id", pa.string()),
    pa.field("pool", pa.string()),
])

INSTANCES = pa.schema([
    # Identity of the task or VM ("collection_id:instance_index" for Google v3, the VM id
    # for Azure). A task that is rescheduled has one row per run; (instance_id, start_time)
    # is unique.
    pa.field("instance_id", pa.string(), nullable=False),
    pa.field("collection_id", pa.int64()),
    pa.field("instance_index", pa.int64()),
    pa.field("machine_id", pa.int64()),
    pa.field("pool", pa.string()),
    pa.field("start_time", pa.int64(), nullable=False),
    # Null: still running at trace end (right-censored).
    pa.field("end_time", pa.int64()),
    # FINISH, KILL, FAIL, EVICT, LOST for Google v3; DELETED for Azure; null when censored.
    pa.field("end_type", pa.string()),
    pa.field("cpu_request", pa.float64()),
    pa.field("memory_request", pa.float64()),
    pa.field("priority", pa.int64()),
    pa.field("scheduling_class", pa.int64()),
    pa.field("collection_type", pa.int64()),
    pa.field("user", pa.string()),
    pa.field("collection_logical_name", pa.string()),
    pa.field("collection_name", pa.string()),
    pa.field("alloc_collection_id", pa.int64()),
    pa.field("alloc_instance_index", pa.int64()),
    pa.field("vertical_scaling", pa.int64()),
    pa.field("scheduler", pa.int64()),
    pa.field("parent_collection_id", pa.int64()),
    # Azure feature columns (null for Google v3).
    pa.field("subscription_id", pa.string()),
    pa.field("deployment_id", pa.string()),
    pa.field("vm_category", pa.string()),
    pa.field("deployment_size", pa.int64()),
])

USAGE = pa.schema([
    pa.field("machine_id", pa.int64()),
    pa.field("instance_id", pa.string(), nullable=False),
    pa.field("start_time", pa.int64(), nullable=False),
    pa.field("end_time", pa.int64(), nullable=False),
    # The request in force at the window start (latest instance event at or before it with
    # cpus > 0 and memory > 0).
    pa.field("cpu_limit", pa.float64(), nullable=False),
    pa.field("memory_limit", pa.float64(), nullable=False),
    pa.field("avg_cpu", pa.float64()),
    pa.field("max_cpu", pa.float64()),
    pa.field("cpu_usage_distribution", pa.list_(pa.float64())),
    pa.field("tail_cpu_usage_distribution", pa.list_(pa.float64())),
    pa.field("avg_memory", pa.float64()),
    pa.field("max_memory", pa.float64()),
    pa.field("priority", pa.int64()),
    pa.field("scheduling_class", pa.int64()),
    pa.field("collection_type", pa.int64()),
    pa.field("alloc_collection_id", pa.int64()),
])

DEAD_LETTERS = pa.schema([
    pa.field("source", pa.string(), nullable=False),
    pa.field("table", pa.string(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
    # The rejected row as the source gave it (a JSON object, or the CSV line).
    pa.field("raw", pa.string()),
])

SOURCE_COUNTS = pa.schema([
    pa.field("source", pa.string(), nullable=False),
    pa.field("table", pa.string(), nullable=False),
    pa.field("read", pa.int64(), nullable=False),
    pa.field("kept", pa.int64(), nullable=False),
    pa.field("rejected", pa.int64(), nullable=False),
])

# Lifetime stage (pipelines/stages/lifetime/). Models are named "uptime", "no_uptime",
# "uptime_lifetime_fractions", "kaplan_meier" and "la_classifier"; times in µs, durations in
# seconds.
LIFETIME_EXAMPLES = pa.schema([
    # (instance_id, start_time) is the instance's key in `instances`, whose columns the
    # model's features are derived from.
    pa.field("instance_id", pa.string(), nullable=False),
    pa.field("start_time", pa.int64(), nullable=False),
    # "train" (observed until the split time, exactly what the regressors trained on) or
    # "test" (observed until the trace end).
    pa.field("split", pa.string(), nullable=False),
    # An age of the uptime_age_s grid (ABSOLUTE_AGES) or a fraction of the lifetime
    # (LIFETIME_FRACTIONS), the config's augmentation.
    pa.field("uptime_s", pa.float64(), nullable=False),
    # The label: log10 of the remaining lifetime, clipped to [min_remaining_s, cap].
    pa.field("log10_remaining_s", pa.float64(), nullable=False),
    # From an instance still running at its observation end (its label is the cap).
    pa.field("censored", pa.bool_(), nullable=False),
])

# Where every valid instance went: "train" (training-period instances that started at
# least lifetime_cap_s before the split: the regressors' examples), "train_recent" (the
# later training-period ones: Kaplan-Meier and, if old enough, the LA classifier use them;
# no examples), "test", and "started_before_trace" (unknown lifetimes, no examples).
LIFETIME_SPLIT = pa.schema([
    pa.field("split", pa.string(), nullable=False),
    pa.field("instances", pa.int64(), nullable=False),
    pa.field("finished", pa.int64(), nullable=False),
    pa.field("censored", pa.int64(), nullable=False),
    pa.field("examples", pa.int64(), nullable=False),
    pa.field("split_time_us", pa.int64()),
    # Censored instances of the split were observed until this time.
    pa.field("observation_end_us", pa.int64()),
])

LIFETIME_MODELS = pa.schema([
    pa.field("name", pa.string(), nullable=False),
    # The model class's KIND (uptime_lifetime_model, la_classifier, kaplan_meier).
    pa.field("kind", pa.string(), nullable=False),
    # Directory of the model's files; pipelines.stages.lifetime.load_model(path) loads it.
    pa.field("path", pa.string(), nullable=False),
    pa.field("features", pa.list_(pa.string())),
    pa.field("train_instances", pa.int64(), nullable=False),
    # Uptime-augmented examples trained on (instances for the classifier and Kaplan-Meier).
    pa.field("train_examples", pa.int64(), nullable=False),
    # Boosting rounds kept after early stopping (null for Kaplan-Meier).
    pa.field("num_trees", pa.int64()),
    pa.field("split_time_us", pa.int64(), nullable=False),
    pa.field("format_version", pa.int64(), nullable=False),
    # Where the uptime model's training examples sit: "ABSOLUTE_AGES" (ages of the
    # uptime_age_s grid) or "LIFETIME_FRACTIONS" (fractions of each lifetime, the paper's);
    # null for models without uptime examples (Kaplan-Meier, LA classifier).
    pa.field("augmentation", pa.string()),
])

_AUGMENTATION = pa.field("augmentation", pa.string())
# The recall of long-lived VMs on a validation slice of the training period that chose
# decision_threshold (the latest-starting validation_fraction of the training instances);
# NaN when the decision is fixed (long_lived_decision_s set, la_target_recall 0).
_TARGET_RECALL = pa.field("target_recall", pa.float64())

_CLASSIFICATION_FIELDS = [
    pa.field("model", pa.string(), nullable=False),
    # Test instances whose class is known, and how many are long-lived.
    pa.field("n", pa.int64(), nullable=False),
    pa.field("n_positive", pa.int64(), nullable=False),
    pa.field("threshold_s", pa.float64(), nullable=False),
    # Predicted positive at or above this score: a predicted lifetime in seconds for the
    # regressors (chosen on validation data for target_recall, or long_lived_decision_s), a
    # probability for the LA classifier (chosen at fit time for la_target_recall).
    pa.field("decision_threshold", pa.float64(), nullable=False),
    pa.field("precision", pa.float64()),
    pa.field("recall", pa.float64()),
    pa.field("f1", pa.float64()),
    # NaN when the test split lacks one of the classes.
    pa.field("auc", pa.float64()),
    pa.field("average_precision", pa.float64()),
    pa.field("precision_at_recall_70", pa.float64()),
    pa.field("precision_at_recall_75", pa.float64()),
    pa.field("precision_at_recall_80", pa.float64()),
    pa.field("precision_at_recall_85", pa.float64()),
]

# "Lives beyond long_lived_threshold_s" from the prediction at arrival (001 §3, Table 4).
# augmentation: the scheme of the model's training examples (see LIFETIME_MODELS).
LIFETIME_LONG_LIVED = pa.schema(_CLASSIFICATION_FIELDS + [_TARGET_RECALL, _AUGMENTATION])

# LA's 2-hour classifier (003 Tables 1 and 3).
LIFETIME_LA_CLASSIFIER = pa.schema(_CLASSIFICATION_FIELDS + [_TARGET_RECALL])

# "Lives beyond long_lived_threshold_s" repredicted at absolute uptimes (the uptime_age_s
# grid), one row per (model, uptime_s): n counts the test instances alive at uptime_s whose
# class is known, scored by their predicted lifetime uptime_s + predicted remaining; the
# decision (a predicted lifetime, s) is chosen per uptime on validation data (see
# target_recall); no lifetime leaks in. Other columns as in _CLASSIFICATION_FIELDS (auc is
# NaN when the instances alive at uptime_s lack a class).
_CLASSIFICATION = {f.name: f for f in _CLASSIFICATION_FIELDS}
LIFETIME_F1_BY_AGE = pa.schema(
    [_CLASSIFICATION["model"], _AUGMENTATION, pa.field("uptime_s", pa.float64(), nullable=False)]
    + [_CLASSIFICATION[name] for name in ("n", "n_positive", "threshold_s",
                                           "decision_threshold")]
    + [_TARGET_RECALL]
    + [_CLASSIFICATION[name] for name in ("precision", "recall", "f1", "auc",
                                           "average_precision", "precision_at_recall_70")]
    + [
        # Largest and median predicted remaining lifetime (s) of the instances alive at
        # uptime_s; NaN when none is.
        pa.field("max_predicted_remaining_s", pa.float64()),
        pa.field("median_predicted_remaining_s", pa.float64()),
    ])

# F1 of "lives beyond the threshold" repredicted at uptime quantile/num_quantiles of the
# lifetime, finished test instances (001 Fig. 9). The uptime is a fraction of the true
# lifetime, so the input leaks the answer: LIFETIME_F1_BY_AGE is the view without the leak.
LIFETIME_F1_BY_UPTIME = pa.schema([
    pa.field("model", pa.string(), nullable=False),
    pa.field("quantile", pa.int64(), nullable=False),
    pa.field("uptime_fraction", pa.float64(), nullable=False),
    pa.field("n", pa.int64(), nullable=False),
    pa.field("precision", pa.float64()),
    pa.field("recall", pa.float64()),
    pa.field("f1", pa.float64()),
    # Called long at a predicted lifetime (uptime + remaining, s) at or above this: the
    # explicit long_lived_decision_s, else threshold_s.
    pa.field("decision_threshold_s", pa.float64()),
    # Always true: the uptime is a fraction of the true lifetime.
    pa.field("leaks_lifetime", pa.bool_()),
    _AUGMENTATION,
])

# |log10 predicted − log10 true remaining| in bins [error_lower, error_upper), at arrival
# only ("initial") and with every reprediction (001 App. C, Fig. 12).
LIFETIME_ERROR_HISTOGRAM = pa.schema([
    pa.field("model", pa.string(), nullable=False),
    pa.field("error_lower", pa.float64(), nullable=False),
    # +inf for the last bin.
    pa.field("error_upper", pa.float64(), nullable=False),
    pa.field("initial_count", pa.int64(), nullable=False),
    pa.field("initial_fraction", pa.float64(), nullable=False),
    pa.field("with_repredictions_count", pa.int64(), nullable=False),
    pa.field("with_repredictions_fraction", pa.float64(), nullable=False),
    _AUGMENTATION,
])

# Harrell's C-index of the lifetime predicted at arrival, all test instances with their
# censoring (001 Table 4).
LIFETIME_CONCORDANCE = pa.schema([
    pa.field("model", pa.string(), nullable=False),
    pa.field("n", pa.int64(), nullable=False),
    pa.field("c_index", pa.float64()),
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
OVERCOMMIT_SCHEDULED_USAGE = pa.schema([
    pa.field("machine_id", pa.int64(), nullable=False),
    pa.field("instance_id", pa.string(), nullable=False),
    pa.field("time", pa.int64(), nullable=False),
    pa.field("usage", pa.float64(), nullable=False),
    pa.field("limit", pa.float64(), nullable=False),
])

OVERCOMMIT_TIMESERIES = pa.schema([
    pa.field("predictor", pa.string(), nullable=False),
    pa.field("machine_id", pa.int64(), nullable=False),
    pa.field("time", pa.int64(), nullable=False),
    pa.field("num_tasks", pa.int64(), nullable=False),
    # Sum of the tasks' usage, each capped at its limit (as the paper's reference does).
    pa.field("total_usage", pa.float64(), nullable=False),
    pa.field("total_limit", pa.float64(), nullable=False),
    # NaN where the teller advertises nothing (an oracle over the last horizon).
    pa.field("predicted_peak", pa.float64()),
    # The scoring oracle (the first oracle teller); NaN where it has no value.
    pa.field("oracle", pa.float64()),
])

# Per machine, averaged over its scored steps (predicted and oracle both known); NaN when
# none is scored (paper 004 §5.1.3).
OVERCOMMIT_MACHINE_METRICS = pa.schema([
    pa.field("predictor", pa.string(), nullable=False),
    pa.field("oracle", pa.string(), nullable=False),
    pa.field("machine_id", pa.int64(), nullable=False),
    pa.field("num_steps", pa.int64(), nullable=False),
    pa.field("scored_steps", pa.int64(), nullable=False),
    pa.field("violation_rate", pa.float64()),
    pa.field("violation_severity", pa.float64()),
    pa.field("savings_ratio", pa.float64()),
])

# The cell (all machines of the run) at each time: sums over the machines scored then.
OVERCOMMIT_CELL_METRICS = pa.schema([
    pa.field("predictor", pa.string(), nullable=False),
    pa.field("oracle", pa.string(), nullable=False),
    pa.field("time", pa.int64(), nullable=False),
    pa.field("num_machines", pa.int64(), nullable=False),
    pa.field("total_limit", pa.float64(), nullable=False),
    pa.field("predicted_peak", pa.float64(), nullable=False),
    pa.field("oracle_peak", pa.float64(), nullable=False),
    # (total_limit - predicted_peak) / total_limit.
    pa.field("savings_ratio", pa.float64()),
])

# CDF quantiles of each metric per predictor: violation_rate, violation_severity and
# savings_ratio over machines, cell_savings_ratio over the cell's times.
OVERCOMMIT_SUMMARY = pa.schema([
    pa.field("predictor", pa.string(), nullable=False),
    pa.field("oracle", pa.string(), nullable=False),
    pa.field("metric", pa.string(), nullable=False),
    pa.field("n", pa.int64(), nullable=False),
    pa.field("mean", pa.float64()),
    pa.field("p10", pa.float64()),
    pa.field("p25", pa.float64()),
    pa.field("p50", pa.float64()),
    pa.field("p75", pa.float64()),
    pa.field("p90", pa.float64()),
    pa.field("p95", pa.float64()),
    pa.field("p99", pa.float64()),
])

# Rows in and out of each overcommit step: read = kept + filtered (left out by the
# configuration) + rejected (dead letters, with their reasons).
OVERCOMMIT_COUNTS = pa.schema([
    pa.field("step", pa.string(), nullable=False),
    pa.field("read", pa.int64(), nullable=False),
    pa.field("kept", pa.int64(), nullable=False),
    pa.field("filtered", pa.int64(), nullable=False),
    pa.field("rejected", pa.int64(), nullable=False),
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
# metric). One replay per (pool, policy, lifetime_source, defrag): lifetime_source is "oracle",
# "noisy_oracle_<accuracy>", "uptime_model" or "one_shot_model"; defrag is "none",
# "lars_lifetime" or "lars_baseline". Percentages are 0-100; `time` is trace µs.
_REPLAY_KEY_FIELDS = [
    pa.field("pool", pa.string(), nullable=False),
    pa.field("policy", pa.string(), nullable=False),
    pa.field("lifetime_source", pa.string(), nullable=False),
    # The noisy oracle's accuracy (null for other sources), for accuracy sweeps.
    pa.field("noisy_oracle_accuracy", pa.float64()),
    pa.field("defrag", pa.string(), nullable=False),
]
PLACEMENT_PCT_METRICS = ("empty_hosts_pct", "upper_bound_empty_hosts_pct",
                         "packing_density_pct", "empty_to_free_ratio_pct",
                         "cpu_allocated_pct", "memory_allocated_pct", "stranded_cpu_pct",
                         "stranded_memory_pct")
PLACEMENT_TIMESERIES = pa.schema(_REPLAY_KEY_FIELDS + [
    pa.field("time", pa.int64(), nullable=False),
    pa.field("empty_hosts", pa.int64(), nullable=False),
    *[pa.field(name, pa.float64()) for name in PLACEMENT_PCT_METRICS],
    pa.field("live_vms", pa.int64(), nullable=False),
    # Counts since the end of the warm-up.
    pa.field("placements", pa.int64(), nullable=False),
    pa.field("failed_placements", pa.int64(), nullable=False),
    pa.field("migrations", pa.int64(), nullable=False),
])
# Metrics whose difference vs the pool's Best-Fit replay (same lifetime source, no
# defragmentation) the summary gives in percentage points, as <metric>_vs_best_fit_pp.
PLACEMENT_BASELINE_METRICS = ("empty_hosts_pct", "packing_density_pct",
                              "empty_to_free_ratio_pct", "stranded_cpu_pct",
                              "stranded_memory_pct")
PLACEMENT_SUMMARY = pa.schema(_REPLAY_KEY_FIELDS + [
    pa.field("num_hosts", pa.int64(), nullable=False),
    # Every VM of the pool kept for the replay: vms = placed + failed + not_replayed (outside
    # the replay window), warm-up VMs included.
    pa.field("vms", pa.int64(), nullable=False),
    pa.field("placed_vms", pa.int64(), nullable=False),
    pa.field("failed_vms", pa.int64(), nullable=False),
    pa.field("not_replayed_vms", pa.int64(), nullable=False),
    pa.field("warmup_vms", pa.int64(), nullable=False),
    pa.field("warmup_failed", pa.int64(), nullable=False),
    # placement.warm_start, who placed the arrivals before the metrics start:
    # "policy_from_start" (the policy under test, from the replay start) or
    # "best_fit_until_metrics" (Best-Fit, then the policy takes over the pool as it is when
    # metrics start); warm_start_vms = those arrivals placed or failed by Best-Fit (0 with
    # policy_from_start). The metric definitions are the same for both.
    pa.field("warm_start", pa.string(), nullable=False),
    pa.field("warm_start_vms", pa.int64(), nullable=False),
    # Since the end of the warm-up.
    pa.field("placements", pa.int64(), nullable=False),
    pa.field("failed_placements", pa.int64(), nullable=False),
    pa.field("migrations", pa.int64(), nullable=False),
    pa.field("num_samples", pa.int64(), nullable=False),
    # Means over the samples (stranding: over the samples with inflation).
    *[pa.field(name, pa.float64()) for name in PLACEMENT_PCT_METRICS],
    # upper_bound_empty_hosts_pct - empty_hosts_pct (001 App. G.2).
    pa.field("gap_to_upper_bound_pp", pa.float64()),
    *[pa.field(f"{name}_vs_best_fit_pp", pa.float64()) for name in PLACEMENT_BASELINE_METRICS],
    # LARS over the whole replay (null without defragmentation; policies/lars.py), the
    # measure of 001 Table 2. Paired: lars_lifetime is a closed-loop replay that decides
    # which hosts to drain and when; each lars_baseline row (one per lars_seed) replays the
    # migration queue of exactly those drains (same hosts, times and VMs) in a random order,
    # and repeats lars_lifetime's pool columns (placements, *_pct, ...) since the queue
    # replay changes no placement; its `migrations` counts its own over the same window.
    # lars_scheduled_migrations = VMs on the drained hosts at drain time = lars_migrations
    # (performed) + lars_saved_migrations (exited before their turn) +
    # lars_failed_migrations (no target host fit in the closed loop; the baseline rows count
    # the same VMs as failed) + VMs still queued at the end.
    pa.field("lars_migrations", pa.int64()),
    pa.field("lars_scheduled_migrations", pa.int64()),
    pa.field("lars_saved_migrations", pa.int64()),
    pa.field("lars_failed_migrations", pa.int64()),
    # Drain decisions (a host counts each time it is picked).
    pa.field("lars_drained_hosts", pa.int64()),
    # The baseline order's seed index, 0 .. lars.baseline_seeds - 1 (null otherwise). The
    # placement_timeseries table has no lars_baseline rows.
    pa.field("lars_seed", pa.int64()),
    # Repredictions of a repredicting source (null otherwise).
    pa.field("predictions", pa.int64()),
    pa.field("prediction_batches", pa.int64()),
])
PLACEMENT_TABLES = {
    "placement_timeseries": PLACEMENT_TIMESERIES,
    "placement_summary": PLACEMENT_SUMMARY,
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
}


def empty_table(schema: pa.Schema) -> pa.Table:
    """A zero-row table of `schema`."""
    return schema.empty_table()
