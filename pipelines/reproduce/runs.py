"""The runs a reproduction reads: configs/*.textproto run through `pipelines.run.run`.

A RunSpec names a config of the repository's configs/, optionally a variant of it (a named
edit of the parsed RunConfig), and, for --quick, how to shrink it (in place) and what that
changes in words; `split_variants` makes the variants of a config that move its time split.
`Runs` runs each spec once
into <root>/<config name> (manifest, staging, dead letters and checks as in `fleetcast run`),
or records why it was skipped (an input that is absent), and then serves each run's tables:
`result(name).sql(SQL)` through `pipelines.query.query`, `result(name).tables()` as the files
the run's manifest lists.
"""

import copy
import dataclasses
import logging
import pathlib
import time
from typing import Callable, Dict, Optional, Sequence, Tuple

import pandas as pd

import configs
from pipelines import config as run_config
from pipelines import run as run_pipeline
from pipelines.io import failures
from pipelines.query import query
from pipelines.report import read_tables
from pipelines.reproduce.claims import Spread

_LOG = logging.getLogger("fleetcast.reproduce")
CONFIG_DIR = pathlib.Path(configs.__file__).resolve().parent


# Beam options of a run of many independent elements: the DirectRunner's 2 worker processes.
TWO_WORKERS = ("--direct_running_mode=multi_processing", "--direct_num_workers=2")


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """A config of configs/ (`file`), its --quick shrinking and the Beam options of its full
    run (--quick runs on the DirectRunner in memory).

    `quick(config)` edits the parsed RunConfig in place; `quick_note` says what it changes;
    `quick_skip`, when set, says why --quick does not run the config at all. `variant`, when
    set, is (suffix, description, edit): the run is the config edited by `edit(config)`
    (before `quick`), named after the file with the suffix appended.
    """

    file: str
    quick: Callable[[object], None]
    quick_note: str
    beam_args: Tuple[str, ...] = ()
    quick_skip: Optional[str] = None
    variant: Optional[Tuple[str, str, Callable[[object], None]]] = None

    @property
    def path(self) -> str:
        return f"configs/{self.file}"

    @property
    def label(self) -> str:
        """The config's path, and the variant's description when there is one (Markdown)."""
        return f"`{self.path}`" + (f" with {self.variant[1]}" if self.variant else "")

    @property
    def name(self) -> str:
        return self.file.split(".")[0] + (self.variant[0] if self.variant else "")

    def config(self, quick: bool):
        """The RunConfig this spec runs (inputs not checked)."""
        config = run_config.load_config(str(CONFIG_DIR / self.file), check_inputs=False)
        if self.variant:
            self.variant[2](config)
        if quick:
            self.quick(config)
        return config


def missing_inputs(config) -> list:
    """The config's problems that only the check of its input files finds (absent files)."""
    invalid = run_config.validate(config, check_inputs=False)
    if invalid:
        raise run_config.ConfigError(f"{config.name} (as reproduce runs it)", invalid)
    return [str(p) for p in run_config.validate(config, check_inputs=True)]


def _days(days: float) -> str:
    return f"{days:g} day{'' if days == 1 else 's'}"


@dataclasses.dataclass
class Result:
    """A published run: its directory, its config and its wall time (s)."""

    directory: str
    config: object
    wall_s: float
    _tables: Optional[Dict[str, pd.DataFrame]] = None

    def sql(self, sql: str) -> pd.DataFrame:
        """The result of `sql` over the run's tables (each a view named after its table)."""
        return query(self.directory, sql).to_pandas()

    def tables(self) -> Dict[str, pd.DataFrame]:
        """{table name: DataFrame} of every table the run's manifest lists (read once)."""
        if self._tables is None:
            self._tables = read_tables(pathlib.Path(self.directory))
        return self._tables

    def _source(self):
        which = self.config.WhichOneof("source")
        return which, getattr(self.config, which)

    def data_label(self) -> str:
        """What the run read, in a few words: the synthetic trace's size, or the source and
        its input files' names."""
        which, source = self._source()
        if which == "synthetic":
            return f"synthetic, {source.machines} machines × {_days(source.days)}"
        return f"{which} " + ", ".join(pathlib.PurePath(value).name for field, value in
                                       source.ListFields()
                                       if isinstance(value, str) and field.name != "pool")

    def data(self) -> str:
        """What the run read: its source's inputs and the rows read from each."""
        which, source = self._source()
        if which == "synthetic":
            return (f"synthetic trace, {source.machines} machines × {_days(source.days)}, "
                    f"seed {source.seed}")
        counts = self.sql("SELECT \"table\", sum(read) AS n FROM source_counts GROUP BY ALL")
        rows = dict(zip(counts["table"], counts["n"]))
        inputs = [f"{field.name} `{value}` ({rows.get(field.name, 0):,} rows)"
                  for field, value in source.ListFields() if isinstance(value, str)
                  and field.name in rows]
        return f"{which}: " + ", ".join(inputs)


class Runs:
    """The runs of one `fleetcast reproduce` invocation, under `root`, each run once."""

    def __init__(self, root: str, quick: bool):
        self.root = pathlib.Path(root)
        self.quick = quick
        self.specs: Dict[str, RunSpec] = {}
        self._results: Dict[str, Result] = {}
        self._skipped: Dict[str, str] = {}
        self._derived: Dict[tuple, object] = {}

    def run(self, spec: RunSpec):
        """Runs `spec` unless this invocation ran or skipped it already."""
        if spec.name in self.specs:
            return
        self.specs[spec.name] = spec
        if self.quick and spec.quick_skip:
            self._skipped[spec.name] = f"{spec.path} was not run: {spec.quick_skip}"
            return
        config = spec.config(self.quick)
        missing = missing_inputs(config)
        if missing:
            self._skipped[spec.name] = f"{spec.path} was not run: {missing[0]}"
            _LOG.info("reproduce: %s", self._skipped[spec.name])
            return
        directory = str(self.root / spec.name)
        _LOG.info("reproduce: running %s%s into %s", spec.path,
                     " (--quick)" if self.quick else "", directory)
        started = time.time()
        try:
            run_pipeline.run(config, directory, [] if self.quick else list(spec.beam_args))
        except Exception as e:  # pylint: disable=broad-except
            reason = failures.reason_of(e)
            if reason is None:
                raise
            raise failures.RunFailed(f"{spec.path}: {reason}") from None
        wall_s = time.time() - started
        _LOG.info("reproduce: %s finished in %.0f s", spec.path, wall_s)
        self._results[spec.name] = Result(directory, config, wall_s)

    def skipped(self, name: str) -> Optional[str]:
        """Why the run of config `name` was skipped, or None."""
        return self._skipped.get(name)

    def result(self, name: str) -> Result:
        return self._results[name]

    def config(self, name: str):
        """The RunConfig of `name` as this invocation ran it; of a run skipped, as it would
        have run (as a full run, for one that --quick leaves out)."""
        if name in self._results:
            return self._results[name].config
        spec = self.specs[name]
        return spec.config(self.quick and not spec.quick_skip)

    def data_label(self, name: str) -> str:
        """What the run of `name` read, in a few words."""
        if name in self._skipped:
            return "not run"
        return self._results[name].data_label()

    def result_dir(self, name: str) -> str:
        return str(self.root / name)

    def derived(self, key: tuple, compute: Callable[[], object]):
        """compute(), once per `key` in this invocation (an analysis several claims read)."""
        if key not in self._derived:
            self._derived[key] = compute()
        return self._derived[key]


def use_synthetic(config, machines: int, days: float, seed: int = 0):
    """Replaces the config's source by the built-in synthetic trace (for --quick)."""
    config.synthetic.machines = machines
    config.synthetic.days = days
    config.synthetic.seed = seed


def keep_repeated(field, keep: Callable[[object], bool]):
    """Keeps the elements of a repeated proto field for which `keep` holds."""
    kept = [copy.deepcopy(element) for element in field if keep(element)]
    del field[:]
    field.extend(kept)


HOUR_S, DAY_S = 3600, 86400


def _duration(seconds: float, compact: bool = False) -> str:
    """"1.5 h", or "1.5 days" from a day on ("1.5h", "1.5d" when `compact`)."""
    if abs(seconds) < DAY_S:
        return f"{seconds / HOUR_S:g}{'' if compact else ' '}h"
    return f"{seconds / DAY_S:g}d" if compact else _days(seconds / DAY_S)


def shift_split(config, offset_s: float):
    """Moves the config's time split `offset_s` later (earlier when negative): the lifetime
    stage's split_time_us and, when the placement replay starts at the split (its test
    period), the replay's start_time_us with it."""
    model, placement = config.lifetime_model, config.placement
    if not model.HasField("split_time_us"):
        raise ValueError(f"{config.name} splits by train_fraction, not at a time")
    if config.HasField("placement") and placement.start_time_us == model.split_time_us:
        placement.start_time_us += int(offset_s * 1e6)
    model.split_time_us += int(offset_s * 1e6)


def split_label(config) -> str:
    """"split at hour 10" (at "day 7" from a day on): where the config trains until."""
    split_s = config.lifetime_model.split_time_us / 1e6
    if split_s < DAY_S:
        return f"split at hour {split_s / HOUR_S:g}"
    return f"split at day {split_s / DAY_S:g}"


def split_variants(spec: RunSpec, offsets_s: Sequence[float],
                   what: str = "the split") -> Tuple[RunSpec, ...]:
    """`spec` (a config with a lifetime_model.split_time_us and no variant) and, per offset,
    the same config with its split moved `offset` seconds by `shift_split`, named
    <config>_split-1.5h (or +1.5d) and described as "`what` 1.5 h earlier"; --quick runs
    only the config's own split."""
    def variant(offset_s):
        when = f"{_duration(abs(offset_s))} {'earlier' if offset_s < 0 else 'later'}"
        return dataclasses.replace(
            spec, quick_skip=spec.quick_skip or "--quick runs the config's own split only",
            variant=(f"_split{'-' if offset_s < 0 else '+'}{_duration(abs(offset_s), True)}",
                     f"{what} {when}", lambda config: shift_split(config, offset_s)))
    return (spec, *(variant(offset) for offset in offsets_s))


def over_splits(specs: Sequence[RunSpec], build: Callable[[str], object]) -> Spread:
    """`build(config name)`'s measure over the runs of `specs` (split_variants'), a claim on
    them reproduced only where it holds at every split."""
    return Spread(tuple(spec.name for spec in specs), build, split_label, "split")
