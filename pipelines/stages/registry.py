"""The registry of analysis stages: RunConfig field → transform, validation, tables, report.

A stage is a PTransform from the dict of tables built so far (the canonical tables and
earlier stages' outputs, by name) to a dict of new tables; a "dead_letters" entry joins the
run's one dead-letter table, an "exclusions" entry of ((stage, table, reason), rows) pairs
the count of what it leaves out by design (pipelines/io/dead_letters.py `left_out`). Stages
run in registration order when their RunConfig field is set. A new stage is a package under
pipelines/stages/ (its transform in stage.py, its `validate_config` in validation.py), its
message in RunConfig (configs/fleetcast.proto), its tables' schemas (pipelines/schemas.py),
optionally a report module (pipelines/report/) with `findings(tables, config)` and
`section(tables, config, figures)`, and one `STAGES.register` call below. A stage's
transform is imported only when a pipeline is built (it loads Beam, and the lifetime stage
LightGBM); its checks and warnings import neither, so validating a config loads no Beam.
"""

import dataclasses
import importlib
from typing import Callable, Optional, Tuple

from configs.registry import Registry
from pipelines import schemas
from pipelines.stages.lifetime import validation as lifetime_validation
from pipelines.stages.overcommit import validation as overcommit_validation
from pipelines.stages.placement import known_bad
from pipelines.stages.placement import validation as placement_validation
from pipelines.stages.shaping import validation as shaping_validation


@dataclasses.dataclass(frozen=True)
class Stage:
    """One analysis stage, for the RunConfig field it is registered under.

    Attributes:
      label: the Beam label of its transform ("Overcommit").
      build: (run config, work_dir) -> its PTransform (a stage reads its own message, and
        another stage's where it depends on it: the placement's admission reads the
        overcommit stage's tellers).
      validate: (checker, run config, trace source or None) -> None, reporting problems
        under the stage's field.
      tables: the names of the tables it writes (pipelines/schemas.py).
      summary: stage message -> one clause for `fleetcast validate` ("placement: 4 policies").
      report: the report module drawing its section (pipelines/report/), or None.
      warn: stage message -> one-line warnings for valid combinations that are known to
        lose or to do nothing, or None.
    """

    label: str
    build: Callable
    validate: Callable
    tables: Tuple[str, ...]
    summary: Callable
    report: Optional[str] = None
    warn: Optional[Callable] = None


def _stage(name: str):
    """The module of the transform of stage `name`, imported on first use."""
    return importlib.import_module(f"pipelines.stages.{name}.stage")


def _has_hosts(source) -> bool:
    return source is None or source.has_hosts


def _has_usage(config) -> bool:
    from pipelines.config import has_usage  # pipelines.config imports this module
    return has_usage(config)


def _trace_end(check, config):
    from pipelines.config import trace_end  # pipelines.config imports this module
    return trace_end(config, check.check_inputs)


STAGES = Registry("stage")
STAGES.register("overcommit", Stage(
    label="Overcommit",
    build=lambda config, work_dir: _stage("overcommit").OvercommitStage(config.overcommit),
    validate=lambda check, config, source: overcommit_validation.validate_config(
        check, config.overcommit, source, _has_usage(config)),
    tables=tuple(schemas.OVERCOMMIT_TABLES),
    summary=lambda message: f"overcommit: {len(message.fortune_teller)} fortune tellers",
    report="pipelines.report.overcommit"))
STAGES.register("lifetime_model", Stage(
    label="Lifetime",
    build=lambda config, work_dir: _stage("lifetime").LifetimeStage(config.lifetime_model,
                                                                    work_dir),
    validate=lambda check, config, source: lifetime_validation.validate_config(
        check, config.lifetime_model, trace_end=_trace_end(check, config)),
    tables=tuple(schemas.LIFETIME_TABLES), summary=lambda message: "lifetime model",
    report="pipelines.report.lifetime"))
STAGES.register("placement", Stage(
    label="Placement",
    build=lambda config, work_dir: _stage("placement").PlacementStage(
        config.placement, config.overcommit if config.HasField("overcommit") else None),
    validate=lambda check, config, source: placement_validation.validate_config(
        check, config.placement,
        config.lifetime_model if config.HasField("lifetime_model") else None,
        has_hosts=_has_hosts(source),
        overcommit=config.overcommit if config.HasField("overcommit") else None,
        has_usage=_has_usage(config)),
    tables=tuple(schemas.PLACEMENT_TABLES),
    summary=lambda message: (f"placement: {len(message.policy) + len(message.policy_plugin)} "
                             "policies" + (f", {len(message.admission)} admissions"
                                           if message.admission else "")),
    report="pipelines.report.placement",
    warn=known_bad.warnings))
STAGES.register("shaping", Stage(
    label="Shaping",
    build=lambda config, work_dir: _stage("shaping").ShapingStage(config.shaping),
    validate=lambda check, config, source: shaping_validation.validate_config(
        check, config.shaping, has_hosts=_has_hosts(source)),
    tables=tuple(schemas.SHAPING_TABLES),
    summary=lambda message: f"shaping: {len(message.policy)} policies",
    report="pipelines.report.shaping",
    warn=shaping_validation.warnings))


def configured(config):
    """(field, Stage) of every stage `config` sets, in run order."""
    return [(field, stage) for field, stage in STAGES.items() if config.HasField(field)]
