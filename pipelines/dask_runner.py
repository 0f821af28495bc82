"""Beam's DaskRunner with side inputs computed once and partition counts kept bounded.

Beam 2.77's DaskRunner translates a pipeline into Dask bags, but three of its translations do
not hold at trace scale (docs/runners.md):

- a side input is computed inside every task that reads it, as a new computation of its
  whole upstream graph (for the placement replays: the source and the lifetime training);
- a grouping keeps its input's partition count and a Flatten adds up its inputs' counts, so
  the groupings after a Flatten of many tables (CoGroupByKey, the Parquet sink) shuffle
  hundreds of partitions through tens of thousands of tasks;
- only the transform visited last is computed: a leaf visited earlier would not run.

This runner keeps Beam's options, result and translation of Create, and changes those: a
side input is one reduction in the graph, read by key by each task of the ParDo; a Flatten
has at most --dask_npartitions partitions (adjacent partitions concatenated), and a grouping
splits each input partition into one piece per output partition, at most --dask_npartitions,
its pieces scheduled first; every leaf is computed, and each step once. A ParDo's tasks are
named after its step and depend on nothing but their inputs, so Dask fuses a chain of steps
into one task per partition. `pipelines.run.local_runner` runs Beam's DaskRunner
(--runner=apache_beam.runners.dask.dask_runner.DaskRunner) as this one.
"""

import dataclasses
import itertools
import operator
import re

import apache_beam as beam
import dask
import dask.bag as db
import dask.distributed
from apache_beam import DoFn, pvalue
from apache_beam.internal import pickler
from apache_beam.pipeline import PipelineVisitor
from apache_beam.runners.common import DoFnContext, DoFnInvoker, DoFnSignature, _OutputHandler
from apache_beam.runners.dask import dask_runner, overrides, transform_evaluator
from apache_beam.transforms.sideinputs import SideInputMap
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from pipelines.io.failures import RunFailed

_SPLIT, _PIECE = "groupbykey-split", "groupbykey-piece"


def _chained(lists) -> list:
    return list(itertools.chain.from_iterable(lists))


def _split_by_key(items, npieces: int) -> list:
    """`npieces` dicts {key: [values]} of a partition's (key, value) pairs, a key's piece
    from its token (the same in every process: Python's hash of a str is not)."""
    pieces = [{} for _ in range(npieces)]
    for key, value in items:
        piece = pieces[int(tokenize(key), 16) % npieces]
        piece.setdefault(key, []).append(transform_evaluator.defenestrate(value))
    return pieces


def _merged_groups(pieces) -> list:
    """(key, values) per key of the pieces, values in the pieces' order."""
    groups = {}
    for piece in pieces:
        for key, values in piece.items():
            groups.setdefault(key, []).extend(values)
    return list(groups.items())


def _grouped(bag: db.Bag, npartitions: int) -> db.Bag:
    """The (key, [values]) groups of a bag of (key, value) pairs, in `npartitions`
    partitions: each input partition is split into a piece per output partition
    (SPLIT, then a PIECE getitem of it), and each output partition merges its pieces."""
    token = tokenize(bag.name, npartitions)
    split, piece, name = (f"{_SPLIT}-{token}", f"{_PIECE}-{token}", f"groupbykey-{token}")
    graph = {}
    for i in range(bag.npartitions):
        graph[(split, i)] = (_split_by_key, (bag.name, i), npartitions)
        for j in range(npartitions):
            graph[(piece, i, j)] = (operator.getitem, (split, i), j)
    for j in range(npartitions):
        graph[(name, j)] = (_merged_groups, [(piece, i, j) for i in range(bag.npartitions)])
    return db.Bag(HighLevelGraph.from_collections(name, graph, dependencies=[bag]), name,
                  npartitions)


def _pieces_first(key) -> int:
    """The scheduling priority of a task (distributed's `priority` annotation): a grouping's
    splits and pieces before anything else. A piece is a getitem, and a split's key, once
    Dask fuses the split into the steps before it, an alias of the fused task: both take no
    time, but at their default priority a worker runs them only after the long tasks it
    has ready, and every output partition of the grouping waits for them."""
    name = key[0] if isinstance(key, tuple) else key
    return int(name.startswith((_SPLIT + "-", _PIECE + "-")))


def _bounded(bag: db.Bag, npartitions) -> db.Bag:
    """`bag` with at most `npartitions` partitions (None: as it is)."""
    if npartitions and bag.npartitions > npartitions:
        return bag.repartition(npartitions=npartitions)
    return bag


@dataclasses.dataclass(frozen=True)
class _Bundle:
    """What a partition's task needs to run a ParDo's DoFn (pickled: each bundle unpickles
    its own, as a DoFn is used by one thread at a time); `views` holds a (view class,
    options, window mapping) per side input, in the DoFn's order. A literal of each task, not
    a task of its own: a ParDo without side inputs then depends on its input alone, and Dask
    fuses a chain of them into one task per partition (a few kB a DoFn)."""

    pickled_fn: bytes
    label: str
    window_fn: object
    args: tuple
    kwargs: dict
    views: tuple


def _run_bundle(items, bundle: _Bundle, *side_values) -> list:
    """The outputs of one partition through the DoFn, its side inputs made from their
    computed values. The DoFn and the receivers are made here: a worker shares a task's
    arguments between its tasks and threads, so nothing a bundle mutates may come from them."""
    receivers = transform_evaluator.OneReceiver()
    side_inputs = [
        SideInputMap(view_class, options, [transform_evaluator.get_windowed_value(v, mapping)
                                           for v in values])
        for (view_class, options, mapping), values in zip(bundle.views, side_values)]
    invoker = DoFnInvoker.create_invoker(
        DoFnSignature(pickler.loads(bundle.pickled_fn)),
        _OutputHandler(window_fn=bundle.window_fn, main_receivers=receivers[None],
                       tagged_receivers=receivers, per_element_output_counter=None,
                       output_batch_converter=None, process_yields_batches=False,
                       process_batch_yields_elements=False),
        context=DoFnContext(bundle.label, state=None), side_inputs=side_inputs,
        input_args=list(bundle.args), input_kwargs=bundle.kwargs, user_state_context=None,
        bundle_finalizer_param=DoFn.BundleFinalizerParam())
    invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for item in items:
        invoker.invoke_process(transform_evaluator.get_windowed_value(item, bundle.window_fn))
    invoker.invoke_finish_bundle()
    invoker.invoke_teardown()
    return [windowed.value for windowed in receivers.values]


class _ParDo(transform_evaluator.DaskBagOp):
    """A ParDo on each partition; each side input (a (view, bag) pair) is reduced to one
    list in the graph, passed whole to every partition's task."""

    def apply(self, input_bag, side_inputs=None):
        transform = self.transform
        args, kwargs = transform.raw_side_inputs
        main_input = next(iter(self.applied.main_inputs.values()))
        side_inputs = side_inputs or []
        bundle = _Bundle(pickler.dumps(transform.fn), transform.label,
                         getattr(getattr(main_input, "windowing", None), "windowfn", None),
                         tuple(args), kwargs, tuple(view for view, _ in side_inputs))
        values = [bag.reduction(list, _chained) for _, bag in side_inputs]
        return _partitionwise(self.applied.full_label, _run_bundle, input_bag, bundle, *values)


def _partitionwise(label: str, function, bag: db.Bag, literal, *arguments) -> db.Bag:
    """The bag of `function(partition, literal, *arguments)` for each partition of `bag`,
    each argument a single-key collection read by its key. Dask's `map_partitions` would pass
    such an argument as a renamed copy of its graph: its whole upstream computed again (on the
    half cell-day, the side inputs' copies read the trace files up to twice more).

    The tasks are named after `label` (a Beam step's full label): Dask estimates a task's
    duration from those of its name's earlier tasks, and places and steals tasks by these
    estimates, so one name for every step's tasks would mix seconds-long steps with
    millisecond ones (and the dashboard shows the steps by name)."""
    name = f"{re.sub(r'[^0-9A-Za-z]+', '_', label)}-{tokenize(bag.name, literal, *arguments)}"
    keys = [argument.key for argument in arguments]
    graph = {(name, i): (function, (bag.name, i), literal, *keys)
             for i in range(bag.npartitions)}
    return db.Bag(HighLevelGraph.from_collections(name, graph, dependencies=[bag, *arguments]),
                  name, bag.npartitions)


class _GroupByKey(transform_evaluator.DaskBagOp):
    def apply(self, input_bag, side_inputs=None):
        npartitions = self.bag_kwargs.get("npartitions") or input_bag.npartitions
        return _grouped(input_bag, min(npartitions, input_bag.npartitions))


class _Flatten(transform_evaluator.DaskBagOp):
    def apply(self, input_bag, side_inputs=None):
        return _bounded(db.concat(input_bag), self.bag_kwargs.get("npartitions"))


TRANSLATIONS = {**transform_evaluator.TRANSLATIONS, beam.ParDo: _ParDo,
                overrides._GroupByKeyOnly: _GroupByKey, overrides._Flatten: _Flatten}


class _BagVisitor(PipelineVisitor):
    """Translates each primitive transform into a bag; `leaves()` are the bags no transform
    reads."""

    def __init__(self, bag_kwargs: dict):
        self._bag_kwargs = bag_kwargs
        self._bags, self._read = {}, set()

    def _bag_of(self, pcoll):
        self._read.add(pcoll.producer)
        return self._bags[pcoll.producer]

    def visit_transform(self, node):
        op = TRANSLATIONS.get(node.transform.__class__, transform_evaluator.NoOp)(
            node, bag_kwargs=self._bag_kwargs)
        inputs = [None if isinstance(i, pvalue.PBegin) else self._bag_of(i)
                  for i in node.inputs]
        if len(inputs) == 1 and not isinstance(op, _Flatten):
            inputs = inputs[0]
        side_inputs = [((type(side), side._view_options(), side._window_mapping_fn),
                        self._bag_of(side.pvalue)) for side in node.side_inputs]
        self._bags[node] = op.apply(inputs or None, side_inputs)

    def leaves(self) -> list:
        return [bag for node, bag in self._bags.items() if node not in self._read]


# Beam's DaskOptions (by their dest) that must be at least 1 when given, and why.
POSITIVE_OPTIONS = {
    "npartitions": ("--dask_npartitions", "the partitions a Flatten or a grouping keeps at most"),
    "partition_size": ("--dask_partition_size", "the elements of a partition"),
    "connection_limit": ("--dask_connection_limit", "the client's open connections"),
}


def check_options(dask_options: dict):
    """RunFailed naming the first Dask option out of its range (Beam itself takes 0 for "not
    given" and lets Dask fail later on a negative number)."""
    for dest, (option, what) in POSITIVE_OPTIONS.items():
        value = dask_options.get(dest)
        if value is not None and value < 1:
            raise RunFailed(f"{option}={value}: give at least 1 ({what})")


class DaskRunner(dask_runner.DaskRunner):
    """Runs a pipeline on the Dask cluster of --dask_client_address (module docstring)."""

    @staticmethod
    def leaf_bags(pipeline, bag_kwargs: dict) -> list:
        """The bags of `pipeline`'s leaves, `bag_kwargs` (npartitions or partition_size)
        shaping them; the pipeline's transforms are replaced by their Dask forms."""
        pipeline.replace_all(overrides.dask_overrides())
        visitor = _BagVisitor(bag_kwargs)
        pipeline.visit(visitor)
        return visitor.leaves()

    def run_pipeline(self, pipeline, options):
        dask_options = options.view_as(dask_runner.DaskOptions).get_all_options(
            drop_default=True, current_only=True)
        check_options(dask_options)
        bag_kwargs = dask_runner.DaskOptions._extract_bag_kwargs(dask_options)
        try:
            client = dask.distributed.Client(**dask_options)
        except (OSError, ValueError) as e:  # no scheduler there, or not an address
            raise RunFailed(f"--dask_client_address={dask_options.get('address')}: cannot "
                            f"reach a Dask scheduler: {e}") from None
        # One collection, the leaves' element counts: computing it runs every leaf, and
        # only numbers come back to this process. (Leaves computed as separate collections
        # are optimized separately, and each gets its own copy of the steps they share.)
        counts = dask.delayed(list)([leaf.count() for leaf in self.leaf_bags(pipeline,
                                                                             bag_kwargs)])
        with dask.annotate(priority=_pieces_first):
            future = client.compute(counts)
        return dask_runner.DaskRunnerResult(client, [future])
