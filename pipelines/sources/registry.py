"""The registry of trace sources: RunConfig `source` name → reader + config validation, and
what the source's canonical tables hold.

A reader is `read(message, work_dir)` → a PTransform from the pipeline's start to
{machines, instances, usage, dead_letters, counts} PCollections of Arrow tables (schemas in
pipelines/schemas.py). A new source is a module in this package (its reader), its checks in
validation.py, and one `SOURCES.register` call below, plus its message in the RunConfig
`source` oneof. A source's module is imported only when a pipeline reads it (it imports
Beam), so that validating a config does not load Beam.
"""

import dataclasses
import importlib
from typing import Callable, FrozenSet, Optional, Union

from configs.registry import Registry
from configs.units import DAY_US
from pipelines.sources import validation


@dataclasses.dataclass(frozen=True)
class TraceSource:
    """One kind of trace.

    Attributes:
      read: (message, work_dir) -> PTransform reading the canonical tables.
      validate: (checker, message, field) -> None.
      title: how messages name the trace ("the Azure V1 trace").
      has_hosts: whether its machines table gives hosts with capacities (a bool, or message
        -> bool when the config decides; `configured` resolves it).
      has_usage: message -> whether the configured source yields a usage table.
      usage_metrics: the Metric choices its usage table carries (None: every one).
      customer_columns: message -> the customer columns (pipelines/history_config.py
        CUSTOMER_COLUMNS) its instances fill.
      span_us: message -> the trace's length in µs when the config fixes it, or None: known
        only once the trace is read.
      last_event: message -> its inputs' last event (pipelines/sources/last_event.py
        LastEvent, with the table it is of) when they can tell it cheaply, or None; read by
        `fleetcast validate` when it checks inputs.
    """

    read: Callable
    validate: Callable
    title: str
    has_hosts: Union[bool, Callable]
    has_usage: Callable
    customer_columns: Callable
    usage_metrics: Optional[FrozenSet[str]] = None
    span_us: Optional[Callable] = None
    last_event: Optional[Callable] = None

    def configured(self, message) -> "TraceSource":
        """This source as `message` configures it: has_hosts a bool."""
        if callable(self.has_hosts):
            return dataclasses.replace(self, has_hosts=bool(self.has_hosts(message)))
        return self


def _reader(name: str):
    """The module pipelines.sources.`name`, imported on first use."""
    return importlib.import_module(f"pipelines.sources.{name}")


SOURCES = Registry("trace source")
SOURCES.register("google_v3", TraceSource(
    read=lambda message, work_dir: _reader("google_v3").ReadGoogleV3(message),
    validate=validation.validate_google_v3, title="the Google v3 trace", has_hosts=True,
    has_usage=lambda message: message.instance_usage.WhichOneof("input") is not None,
    customer_columns=lambda message: (
        ("user",) if message.collection_events.WhichOneof("input") else ())))
SOURCES.register("azure_v1", TraceSource(
    read=lambda message, work_dir: _reader("azure_v1").ReadAzureV1(message),
    validate=validation.validate_azure_v1, title="the Azure V1 trace", has_hosts=False,
    has_usage=lambda message: bool(message.vm_cpu_readings),
    customer_columns=lambda message: ("subscription_id",) if message.vmtable else (),
    usage_metrics=frozenset({"avg_cpu", "max_cpu"})))
SOURCES.register("azure_packing_2020", TraceSource(
    read=lambda message, work_dir: _reader("azure_packing").ReadAzurePacking2020(message),
    validate=validation.validate_azure_packing, title="the Azure packing trace",
    has_hosts=False, has_usage=lambda message: False,
    customer_columns=lambda message: ("user",)))
SOURCES.register("synthetic", TraceSource(
    read=lambda message, work_dir: _reader("synthetic").read_synthetic(message, work_dir),
    validate=validation.validate_synthetic, title="the synthetic trace", has_hosts=True,
    has_usage=lambda message: True,
    customer_columns=lambda message: ("user",),
    # The generator's events all fall before its horizon (synthetic.trace.trace_horizon_us).
    span_us=lambda message: round(message.days * DAY_US)))
SOURCES.register("google_2011", TraceSource(
    read=lambda message, work_dir: _reader("google_2011").ReadGoogle2011(message),
    validate=validation.validate_google_2011, title="the Google 2011 trace",
    has_hosts=validation.google_2011_has_machines, has_usage=validation.google_2011_has_usage,
    customer_columns=lambda message: ("user",),
    usage_metrics=frozenset({"avg_cpu", "max_cpu", "avg_memory", "max_memory"}),
    last_event=validation.google_2011_last_event))
