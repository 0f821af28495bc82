"""Loading and validating run configs (configs/fleetcast.proto, text format).

`load_config` parses a text config; `validate` checks what the schema cannot express (ranges,
required fields per source, inputs that exist) and reports every problem by its field path,
e.g. ``overcommit.fortune_teller[1].predictor.rc_like.percentile: must be in [0, 100], got
120``. The source, each stage and each plug-in are checked by their own validators (their
registry entries and stage modules); this module walks the run.
"""

import os
import pathlib
import re

from apache_beam.io.filesystems import FileSystems
from google.protobuf import text_format

from configs import fleetcast_pb2
from configs.checks import Checker, ConfigError, ConfigProblem
from pipelines import history
from pipelines.sources.registry import SOURCES
from pipelines.stages.registry import configured as configured_stages

__all__ = ["ConfigError", "ConfigProblem", "absolute_path", "config_name", "load_config",
           "parse_config", "validate", "with_absolute_paths"]

CANONICAL_TABLES = ("machines", "instances", "usage")
# Former RunConfig fields, now in `overcommit { }`: a config using them gets a message saying so.
OVERCOMMIT_FIELDS = ("filter", "filtered_usage", "metric", "reset_and_shift", "scheduler",
                     "scheduled_usage", "fortune_teller")
_NO_FIELD = re.compile(r'"fleetcast\.RunConfig" has no field named "(\w+)"')


def parse_config(text: str, source: str = "<config>") -> fleetcast_pb2.RunConfig:
    """Parses text-format `text`; a syntax error names the line, column and field."""
    try:
        return text_format.Parse(text, fleetcast_pb2.RunConfig())
    except text_format.ParseError as e:
        moved = _NO_FIELD.search(str(e))
        reason = str(e)
        if moved and moved.group(1) in OVERCOMMIT_FIELDS:
            reason = (f"{moved.group(1)} is no longer a top-level field: the overcommit stages "
                      f"are one message since fleetcast 0.2; put {', '.join(OVERCOMMIT_FIELDS)} "
                      f"inside overcommit {{ ... }}")
        raise ConfigError(source, [ConfigProblem(f"line {e.GetLine()}", reason)]) from None


def load_config(path: str, check_inputs: bool = True) -> fleetcast_pb2.RunConfig:
    """Reads, parses and validates the config at `path` (its inputs must exist with
    `check_inputs`); raises ConfigError."""
    config, missing = read_config(path)
    if missing and check_inputs:
        raise ConfigError(path, missing)
    return config


def read_config(path: str):
    """(the config at `path`, its missing inputs as ConfigProblems): reads, parses and
    validates it; raises ConfigError for every problem but inputs that are not there."""
    if not FileSystems.exists(path):
        raise ConfigError(path, [ConfigProblem("<file>", "config file does not exist")])
    try:
        with FileSystems.open(path) as f:
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
        history.validate_config(check, config.customer_history)
    for _, stage in configured_stages(config):
        stage.validate(check, config, source)
    _validate_name(check, config.name)
    _validate_output(check, config.output)
    return check.problems


def warnings(config: fleetcast_pb2.RunConfig):
    """One-line warnings for a valid config's combinations that are known to lose or to do
    nothing (each stage's `warn`)."""
    return [line for field, stage in configured_stages(config) if stage.warn
            for line in stage.warn(getattr(config, field))]


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
