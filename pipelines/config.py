"""Loading and validating run configs (configs/fleetcast.proto, text format).

`load_config` parses a text config; `validate` checks what the schema cannot express (ranges,
required fields per source, inputs that exist) and reports every problem by its field path,
e.g. ``overcommit.fortune_teller[1].predictor.rc_like.percentile: must be in [0, 100], got
120``. The source, each stage and each plug-in are checked by their own validators (their
registry entries and stage modules); this module walks the run. None of it imports Beam:
Beam's file systems load only to read a config that is not a plain local file and to match
the input files a config names.
"""

import os
import pathlib
import re
from typing import Optional, Tuple

from google.protobuf import text_format

from configs import fleetcast_pb2
from configs.checks import Checker, ConfigError, ConfigProblem
from pipelines import history_config
from pipelines.config_errors import parse_problem
from pipelines.sources.registry import SOURCES
from pipelines.stages.registry import configured as configured_stages
from predictors.lifetime.history import HISTORY_KEYS, HISTORY_STATISTICS, history_column

__all__ = ["ConfigError", "ConfigProblem", "absolute_path", "config_name", "load_config",
           "parse_config", "validate", "with_absolute_paths"]

CANONICAL_TABLES = ("machines", "instances", "usage")


def parse_config(text: str, source: str = "<config>") -> fleetcast_pb2.RunConfig:
    """Parses text-format `text`; a syntax error is one ConfigProblem naming the line and
    the field path, with the valid names of a misspelled field or enum value
    (`config_errors.parse_problem`)."""
    try:
        return text_format.Parse(text, fleetcast_pb2.RunConfig())
    except text_format.ParseError as e:
        problem = parse_problem(e, text, fleetcast_pb2.RunConfig.DESCRIPTOR)
        raise ConfigError(source, [problem]) from None


def load_config(path: str, check_inputs: bool = True) -> fleetcast_pb2.RunConfig:
    """Reads, parses and validates the config at `path` (its inputs must exist with
    `check_inputs`); raises ConfigError."""
    config, missing = read_config(path)
    if missing and check_inputs:
        raise ConfigError(path, missing)
    return config


# A config path that Beam's file systems read otherwise than a plain local open: a URL
# (gs://...), or a file they decompress by its suffix (CompressionTypes.AUTO).
BEAM_READ = re.compile(r"://|\.(bz2|deflate|gz|zstd?|xz|lzma)$", re.IGNORECASE)


def read_config(path: str):
    """(the config at `path`, its missing inputs as ConfigProblems): reads, parses and
    validates it; raises ConfigError for every problem but inputs that are not there."""
    if BEAM_READ.search(path):
        from apache_beam.io.filesystems import FileSystems
        exists, open_binary = FileSystems.exists, FileSystems.open
    else:  # what Beam's local file system does, without loading Beam
        exists, open_binary = os.path.exists, lambda name: open(name, "rb")
    if not exists(path):
        raise ConfigError(path, [ConfigProblem("<file>", "config file does not exist")])
    try:
        with open_binary(path) as f:
            text = f.read().decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(path, [ConfigProblem("<file>", "is not UTF-8 text (a config is a "
                                               "text-format RunConfig)")]) from None
    except Exception as e:  # pylint: disable=broad-except  # a directory, no permission, ...
        raise ConfigError(path, [ConfigProblem("<file>", f"cannot be read: {e}")]) from None
    config = parse_config(text, path)
    problems = validate(config)
    invalid = [p for p in problems if not p.missing_input]
    if invalid:
        raise ConfigError(path, invalid)
    return config, problems


# (message, field) of every config field that names a file, a file pattern or a directory.
PATH_FIELDS = frozenset([
    ("fleetcast.TableInput", "path"), ("fleetcast.DataLocation", "parquet"),
    ("fleetcast.AzureV1Source", "vmtable"), ("fleetcast.AzureV1Source", "vm_cpu_readings"),
    ("fleetcast.AzurePacking2020Source", "sqlite_path"),
    ("fleetcast.Google2011Source", "job_events"), ("fleetcast.Google2011Source", "task_events"),
    ("fleetcast.Google2011Source", "machine_events"),
    ("fleetcast.Google2011Source", "task_usage"),
    ("fleetcast.LifetimeModelConfig", "model_dir"), ("fleetcast.Output", "parquet_dir")])


def absolute_path(path: str) -> str:
    """A local relative `path` (or pattern) made absolute from this process's directory;
    any other path (absolute, gs://, empty) as it is."""
    from apache_beam.io.filesystems import FileSystems
    if not path or FileSystems.get_scheme(path) is not None or os.path.isabs(path):
        return path
    return os.path.abspath(path)


def with_absolute_paths(config: fleetcast_pb2.RunConfig) -> fleetcast_pb2.RunConfig:
    """A copy of `config` whose local relative paths (PATH_FIELDS) are absolute: a cluster's
    workers run in directories of their own, and open what the submitter names there."""
    copy = fleetcast_pb2.RunConfig()
    copy.CopyFrom(config)
    _absolutize(copy)
    return copy


def _absolutize(message):
    for field, value in message.ListFields():
        if field.message_type is None:
            if (message.DESCRIPTOR.full_name, field.name) in PATH_FIELDS:
                setattr(message, field.name, absolute_path(value))
        elif field.is_repeated:
            if not field.message_type.GetOptions().map_entry:
                for item in value:
                    _absolutize(item)
        else:
            _absolutize(value)


def config_name(config: fleetcast_pb2.RunConfig, path: str) -> str:
    """The run's name: `name` from the config, else the config file's stem."""
    return config.name or pathlib.Path(path).name.split(".")[0]


def _matches(pattern: str) -> bool:
    from apache_beam.io.filesystems import FileSystems
    try:
        return any(r.metadata_list for r in FileSystems.match([pattern]))
    except Exception:  # pylint: disable=broad-except
        # FileSystems raises for a pattern that matches nothing on some file systems.
        return False


def _loaded(message, name: str) -> bool:
    return message.HasField(name) and getattr(message, name).HasField("input")


def has_usage(config) -> bool:
    """Whether the run has a usage table: loaded, or from its source."""
    overcommit = config.overcommit
    if _loaded(config, "usage") or _loaded(overcommit, "filtered_usage") or _loaded(
            overcommit, "scheduled_usage"):
        return True
    which = config.WhichOneof("source")
    return which is not None and SOURCES[which].has_usage(getattr(config, which))


def trace_end(config, check_inputs: bool) -> Optional[Tuple[int, str]]:
    """(µs, what it is) after which the trace holds no arrival, when it can be told before
    the run: the synthetic trace's end from the config alone, or, when inputs are checked,
    the last event of a source whose parts are in time order (its last part); None
    otherwise, or when the instances are loaded."""
    which = config.WhichOneof("source")
    if which is None or _loaded(config, "instances"):
        return None
    source, message = SOURCES[which], getattr(config, which)
    if source.span_us is not None:
        return source.span_us(message), "the trace's end"
    found = source.last_event(message) if check_inputs and source.last_event else None
    if found is None:
        return None
    table, last = found
    return last.time_us, f"the trace's last event (in {table} {last.path})"


def validate(config: fleetcast_pb2.RunConfig, check_inputs: bool = True):
    """Every problem of `config` as a list of ConfigProblem (empty when it can run).

    With `check_inputs`, file inputs must exist now (fail fast instead of mid-run).
    """
    check = Checker(check_inputs, _matches)
    which = config.WhichOneof("source")
    source = SOURCES[which].configured(getattr(config, which)) if which else None
    for table in CANONICAL_TABLES:
        if config.HasField(table):
            check.load_or_write(getattr(config, table), table)
    if source is None and not (any(_loaded(config, t) for t in ("instances", "usage"))
                               or has_usage(config)):
        check.fail("source", f"no source ({', '.join(SOURCES)}) and no loaded canonical table")
    if source is not None:
        source.validate(check, getattr(config, which), which)
    if config.HasField("customer_history"):
        history_config.validate_config(check, config.customer_history)
    _validate_history_features(check, config)
    for _, stage in configured_stages(config):
        stage.validate(check, config, source)
    _validate_name(check, config.name)
    _validate_output(check, config.output)
    return check.problems


def warnings(config: fleetcast_pb2.RunConfig):
    """One-line warnings for a valid config's combinations that are known to lose or to do
    nothing (the customer history's, then each stage's `warn`)."""
    return [line for _, line in warnings_by_field(config)]


def warnings_by_field(config: fleetcast_pb2.RunConfig):
    """`warnings` as (top-level field, line): "customer_history" or the stage's field."""
    return [("customer_history", line) for line in _history_warnings(config)] + [
        (field, line) for field, stage in configured_stages(config) if stage.warn
        for line in stage.warn(getattr(config, field))]


# The customer-history key whose column each history feature is, by feature name.
HISTORY_FEATURE_KEYS = {history_column(key, statistic): key for key in HISTORY_KEYS
                        for statistic in HISTORY_STATISTICS}


def _feature_lists(lifetime):
    """(field, feature names) of each feature list of a LifetimeModelConfig (empty: every
    feature)."""
    if lifetime.variant:
        return [(f"lifetime_model.variant[{i}]", variant.feature)
                for i, variant in enumerate(lifetime.variant)]
    return [("lifetime_model", lifetime.feature)]


def _validate_history_features(check, config):
    """A history feature needs the customer_history that fills its column (else null in
    every row); a loaded instances table may hold the columns already."""
    if not config.HasField("lifetime_model") or _loaded(config, "instances"):
        return
    filled = ({key for key, _ in history_config.history_keys(config.customer_history)}
              if config.HasField("customer_history") else set())
    for field, features in _feature_lists(config.lifetime_model):
        for j, name in enumerate(features):
            key = HISTORY_FEATURE_KEYS.get(name)
            if key is not None and key not in filled:
                check.fail(f"{field}.feature[{j}]", _unfilled_history(config, name))


def _unfilled_history(config, feature: str) -> str:
    if not config.HasField("customer_history"):
        return (f"{feature!r} is a customer-history column, null in every row without a "
                "customer_history block: add customer_history { }")
    return (f"{feature!r} is null in every row with customer_history.logical_name false: "
            "set it to true")


def _history_warnings(config):
    """customer_history that fills nothing, or that no stage reads."""
    if not config.HasField("customer_history"):
        return []
    return [line for line in (_unfilled_customer(config), _unread_history(config)) if line]


def _unfilled_customer(config) -> Optional[str]:
    """A customer column that the source never fills (its instances, not loaded ones)."""
    which = config.WhichOneof("source")
    if which is None or _loaded(config, "instances"):
        return None
    source = SOURCES[which]
    fills = source.customer_columns(getattr(config, which))
    wanted = history_config.customer_columns(config.customer_history)
    if set(fills) & set(wanted):
        return None
    field = ("customer_history.customer_column" if config.customer_history.customer_column
             else "customer_history")
    reason = (f"{source.title} never fills {' or '.join(wanted)} (it fills {', '.join(fills)})"
              if fills else f"{source.title} as configured fills no customer column "
              f"({', '.join(history_config.CUSTOMER_COLUMNS)})")
    return f"{field}: {reason}, so every customer_* column is null"


def _unread_history(config) -> Optional[str]:
    """customer_history whose columns no lifetime_model feature list reads (only the
    lifetime models read them)."""
    if not config.HasField("lifetime_model"):
        why = "the run has no lifetime_model"
    elif any(not features or any(name in HISTORY_FEATURE_KEYS for name in features)
             for _, features in _feature_lists(config.lifetime_model)):
        return None
    else:
        why = "no lifetime_model feature list names one"
    return (f"customer_history: no stage reads its customer_* and logical_name_* columns "
            f"({why}); they only fill the instances table")


def _validate_output(check, output):
    check.positive(output, "num_shards", "output")
    if output.WhichOneof("sink") == "bigquery_dataset":
        check.bigquery_dataset(output.bigquery_dataset, "output.bigquery_dataset")
    elif output.WhichOneof("sink") == "parquet_dir":
        check.require(bool(output.parquet_dir.strip()), "output.parquet_dir",
                      "is empty: give a directory (local or gs://), or leave it unset for "
                      "--output_dir")


# A run's name is the default output directory results/<name>: one plain directory name.
RUN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def _validate_name(check, name: str):
    check.require(not name or RUN_NAME.match(name) is not None, "name",
                  "must be a plain directory name (letters, digits, '_', '-', '.'; not "
                  f"starting with '.'), so results/<name> stays under results/: got {name!r}")
