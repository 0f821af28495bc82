"""The stage registry drives the run, its validation, `fleetcast validate` and the report:
every registered stage is a RunConfig field with a transform, a validator, declared tables
and a report section; a config's stages run in registration order."""

import importlib

from configs import fleetcast_pb2
from pipelines import config as run_config
from pipelines import run as run_pipeline
from pipelines import schemas
from pipelines.stages.registry import STAGES, configured

ALL_STAGES = """
synthetic { machines: 2 days: 1 }
shaping { policy: BASELINE }
placement { policy: BEST_FIT lifetime_source { oracle: true } }
lifetime_model { }
overcommit { fortune_teller { name: "oracle" oracle {} } }
"""


def test_every_stage_is_a_run_config_field_with_tables_and_a_report():
    fields = fleetcast_pb2.RunConfig.DESCRIPTOR.fields_by_name
    declared = []
    for field, stage in STAGES.items():
        assert fields[field].message_type is not None, field
        assert stage.tables and set(stage.tables) <= set(schemas.TABLES), field
        declared += stage.tables
        report = importlib.import_module(stage.report)
        assert callable(report.section) and callable(report.findings), field
    assert len(declared) == len(set(declared))  # a table belongs to one stage
    assert set(schemas.TABLES) - set(declared) == {
        *schemas.CANONICAL, "dead_letters", "exclusions", "source_counts"}


def test_stages_run_in_registration_order_whatever_the_config_order():
    config = run_config.parse_config(ALL_STAGES)
    assert [field for field, _ in configured(config)] == [
        "overcommit", "lifetime_model", "placement", "shaping"]
    assert [label for label, _ in run_pipeline.stages(config, "/tmp/unused")] == [
        "Overcommit", "Lifetime", "Placement", "Shaping"]


def test_each_stage_validates_its_own_field():
    config = run_config.parse_config(ALL_STAGES.replace("policy: BASELINE", "").replace(
        "policy: BEST_FIT", ""))
    problems = {p.field for p in run_config.validate(config, check_inputs=False)}
    assert {"shaping.policy", "placement.policy"} <= problems
