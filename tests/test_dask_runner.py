"""fleetcast's DaskRunner (pipelines/dask_runner.py) on a local in-process Dask cluster: a side
input's upstream runs once, groupings stay within --dask_npartitions and group as a dict would,
their pieces first, steps fuse, every leaf runs, and each element comes out once whatever the
partitioning."""

import collections
import json
import os
import pathlib
import random
import subprocess
import sys
import uuid

import apache_beam as beam
import dask
import dask.bag as db
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

distributed = pytest.importorskip("distributed")
from distributed.diagnostics.plugin import SchedulerPlugin  # noqa: E402

from pipelines import cli, dask_runner, run  # noqa: E402
from tests.helpers import run_cli  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as local:
        yield local


def _options(cluster, npartitions: int) -> PipelineOptions:
    return PipelineOptions([f"--dask_client_address={cluster.scheduler_address}",
                            f"--dask_npartitions={npartitions}"])


def _run(pipeline):
    """Runs `pipeline` to the end and closes the client its runner opened (left open, it
    retries the module's cluster after the module ends and logs into later tests)."""
    result = pipeline.run()
    try:
        result.wait_until_finish()
    finally:
        result.client.close()


class _Record(beam.DoFn):
    """Writes each bundle's elements to a new JSON file in `directory`, passes them on."""

    def __init__(self, directory: str):
        self._directory = directory

    def start_bundle(self):
        self._seen = []

    def process(self, element):
        self._seen.append(element)
        yield element

    def finish_bundle(self):
        if self._seen:
            path = os.path.join(self._directory, f"{uuid.uuid4().hex}.json")
            with open(path, "w", encoding="utf-8") as out:
                json.dump(self._seen, out)


def _recorded(directory) -> list:
    elements = []
    for name in os.listdir(directory):
        with open(os.path.join(directory, name), encoding="utf-8") as recorded:
            elements.extend(json.load(recorded))
    return elements


def _with_side(element, side):
    return [element, sorted(side)]


def test_a_side_input_runs_its_upstream_once(cluster, tmp_path):
    upstream, out = tmp_path / "upstream", tmp_path / "out"
    upstream.mkdir()
    out.mkdir()
    pipeline = beam.Pipeline(runner=dask_runner.DaskRunner(), options=_options(cluster, 4))
    side = (pipeline | "Side" >> beam.Create([10, 20, 30])
            | "Upstream" >> beam.ParDo(_Record(str(upstream))))
    _ = (pipeline | "Main" >> beam.Create(list(range(12)))
         | "Read" >> beam.Map(_with_side, beam.pvalue.AsList(side))
         | "Out" >> beam.ParDo(_Record(str(out))))
    _ = side | "AlsoAMainInput" >> beam.Map(abs)
    _run(pipeline)
    # Beam's DaskRunner computes the side input again in each of the 4 partitions' tasks; a
    # side input passed to Dask's map_partitions is a renamed copy of its upstream graph.
    assert sorted(_recorded(upstream)) == [10, 20, 30]
    assert sorted(_recorded(out)) == [[i, [10, 20, 30]] for i in range(12)]


def _keyed(i):
    return i % 5, i


def _sorted_group(group):
    key, values = group
    return [key, sorted(values)]


def _grouping_pipeline(cluster, directory: str):
    pipeline = beam.Pipeline(runner=dask_runner.DaskRunner(), options=_options(cluster, 3))
    parts = [pipeline | f"Create{k}" >> beam.Create(list(range(10 * k, 10 * k + 10)))
             for k in range(8)]
    _ = (parts | beam.Flatten() | beam.Map(_keyed) | beam.GroupByKey()
         | beam.Map(_sorted_group) | beam.ParDo(_Record(directory)))
    return pipeline


def test_a_flatten_and_a_grouping_keep_at_most_npartitions(cluster, tmp_path):
    leaves = dask_runner.DaskRunner.leaf_bags(_grouping_pipeline(cluster, str(tmp_path)),
                                              {"npartitions": 3})
    # Beam's DaskRunner: 8 x 3 partitions into the grouping, and out of it.
    assert [leaf.npartitions for leaf in leaves] == [3]
    _run(_grouping_pipeline(cluster, str(tmp_path)))
    assert sorted(_recorded(tmp_path)) == [[k, list(range(k, 80, 5))] for k in range(5)]


def test_every_leaf_runs_and_each_element_once(cluster, tmp_path):
    shared, first, second = tmp_path / "shared", tmp_path / "first", tmp_path / "second"
    for directory in (shared, first, second):
        directory.mkdir()
    pipeline = beam.Pipeline(runner=dask_runner.DaskRunner(), options=_options(cluster, 7))
    numbers = (pipeline | beam.Create(list(range(200)))
               | "Shared" >> beam.ParDo(_Record(str(shared))))
    _ = numbers | "First" >> beam.ParDo(_Record(str(first)))
    _ = (numbers | "Square" >> beam.Map(lambda i: i * i)
         | "Second" >> beam.ParDo(_Record(str(second))))
    _run(pipeline)
    # The step both leaves read runs once, not once per leaf.
    assert collections.Counter(_recorded(shared)) == collections.Counter(range(200))
    assert collections.Counter(_recorded(first)) == collections.Counter(range(200))
    assert collections.Counter(_recorded(second)) == collections.Counter(
        i * i for i in range(200))


@pytest.mark.parametrize("seed", range(5))
def test_a_grouping_groups_as_a_dict_of_lists_would(seed):
    rng = random.Random(seed)
    partitions = [[(rng.choice(["a", "b", ("c", 1), 7, 8, None]), rng.random())
                   for _ in range(rng.randrange(0, 30))]
                  for _ in range(rng.randrange(1, 7))]
    npartitions = rng.randrange(1, 9)
    bag = db.from_delayed([dask.delayed(list)(part) for part in partitions])
    grouped = dask_runner._grouped(bag, npartitions)
    with dask.config.set(scheduler="sync"):
        computed = grouped.compute()
    expected = collections.defaultdict(list)
    for key, value in (pair for part in partitions for pair in part):
        expected[key].append(value)
    # One group per key, its values in the input's order.
    assert grouped.npartitions == npartitions
    assert len(computed) == len(expected)
    assert dict(computed) == dict(expected)


def test_a_key_goes_to_the_same_piece_in_every_process():
    # Python's hash of a str changes with each process (PYTHONHASHSEED); a grouping's
    # pieces must not.
    code = ("from pipelines import dask_runner; print([piece for piece, groups in enumerate("
            "dask_runner._split_by_key([('cell_a', 1), (('usage', 3), 2), (7, 3)], 5)) "
            "if groups])")
    printed = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
               for seed in ("1", "2")}
    assert printed == {"[0, 2, 3]\n"}


def test_a_step_without_side_inputs_depends_on_its_input_alone(cluster):
    pipeline = beam.Pipeline(runner=dask_runner.DaskRunner(), options=_options(cluster, 2))
    _ = (pipeline | beam.Create([1, 2, 3]) | "Double" >> beam.Map(lambda i: 2 * i)
         | "Square" >> beam.Map(lambda i: i * i))
    (leaf,) = dask_runner.DaskRunner.leaf_bags(pipeline, {"npartitions": 2})
    layers = leaf.__dask_graph__().dependencies
    # Dask fuses such a chain into one task per partition; a dependency of its own (the
    # DoFn, say) would keep each step a task of its own.
    assert leaf.name.startswith("Square-")
    (upstream,) = layers[leaf.name]
    assert upstream.startswith("Double-") and len(layers[upstream]) == 1


class _Priorities(SchedulerPlugin):
    """Each task's user priority (the first of its priorities, negated) as it starts."""

    def __init__(self, scheduler):
        self._scheduler, self.seen = scheduler, {}

    def transition(self, key, start, finish, *args, **kwargs):
        if finish == "processing":
            self.seen[key] = -self._scheduler.tasks[key].priority[0]


def test_a_groupings_splits_and_pieces_run_first(cluster, tmp_path):
    assert dask_runner._pieces_first(("groupbykey-piece-0a1b", 3, 1)) == 1
    assert dask_runner._pieces_first(("groupbykey-split-0a1b", 3)) == 1
    # Steps fused with a split (named after all of their parts) and a grouping's merge.
    assert dask_runner._pieces_first(("Read-groupbykey-split-0a1b", 3)) == 0
    assert dask_runner._pieces_first(("groupbykey-0a1b", 3)) == 0
    assert dask_runner._pieces_first("finalize-0a1b") == 0
    priorities = _Priorities(cluster.scheduler)
    cluster.scheduler.add_plugin(priorities, name="priorities")
    try:
        _run(_grouping_pipeline(cluster, str(tmp_path)))
    finally:
        cluster.scheduler.remove_plugin(name="priorities")
    first = {key for key, priority in priorities.seen.items() if priority == 1}
    assert first and all(dask_runner._pieces_first(key) for key in first)
    assert len(first) < len(priorities.seen)


def test_beams_dask_runner_runs_as_fleetcasts():
    runner = run.local_runner(PipelineOptions(
        ["--runner=apache_beam.runners.dask.dask_runner.DaskRunner"]))
    assert isinstance(runner, dask_runner.DaskRunner)


def test_an_unreachable_scheduler_fails_the_run_in_one_line(tmp_path, capsys):
    config = tmp_path / "demo.textproto"
    config.write_text('name: "demo"\nsynthetic { machines: 2 days: 1 seed: 1 }\n')
    assert run_cli(config, tmp_path / "out",
                   "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                   "--dask_client_address=tcp://127.0.0.1:1", "--dask_connection_timeout=1"
                   ) == cli.EXIT_RUN_FAILED
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("fleetcast: run failed: --dask_client_address=tcp://127.0.0.1:1: "
                              "cannot reach a Dask scheduler: ")
    assert not (tmp_path / "out" / "usage").exists()


@pytest.mark.parametrize("option, message", [
    ("--dask_npartitions=-1", "give at least 1 (the partitions a Flatten or a grouping keeps "
                              "at most)"),
    ("--dask_npartitions=-8", "give at least 1 (the partitions a Flatten or a grouping keeps "
                              "at most)"),
    # Beam reads 0 as "not given"; given, it is as wrong as -1.
    ("--dask_npartitions=0", "give at least 1 (the partitions a Flatten or a grouping keeps "
                             "at most)"),
    ("--dask_partition_size=0", "give at least 1 (the elements of a partition)"),
    ("--dask_connection_limit=-2", "give at least 1 (the client's open connections)"),
])
def test_a_dask_option_out_of_range_fails_the_run_in_one_line(tmp_path, capsys, option,
                                                              message):
    config = tmp_path / "demo.textproto"
    config.write_text('name: "demo"\nsynthetic { machines: 2 days: 1 seed: 1 }\n')
    # Checked before the scheduler is reached (there is none at this address).
    assert run_cli(config, tmp_path / "out",
                   "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                   "--dask_client_address=tcp://127.0.0.1:1", "--dask_connection_timeout=1",
                   option) == cli.EXIT_RUN_FAILED
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"fleetcast: run failed: {option}: {message}"
    assert not (tmp_path / "out" / "usage").exists()


def test_a_client_address_that_is_no_address_fails_the_run_in_one_line(tmp_path, capsys):
    config = tmp_path / "demo.textproto"
    config.write_text('name: "demo"\nsynthetic { machines: 2 days: 1 seed: 1 }\n')
    assert run_cli(config, tmp_path / "out",
                   "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                   "--dask_client_address=not an address") == cli.EXIT_RUN_FAILED
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("fleetcast: run failed: --dask_client_address=not an address: cannot "
                       "reach a Dask scheduler: missing port number in address 'not an "
                       "address'")


def test_a_dask_run_on_untested_versions_fails_at_start_in_one_line(tmp_path, monkeypatch):
    from pipelines import dask_versions
    versions = {"apache-beam": "2.78.0", "dask": "2026.8.0", "distributed": "2026.8.0"}
    monkeypatch.setattr(dask_versions, "_installed", versions.get)
    options = PipelineOptions(["--runner=apache_beam.runners.dask.dask_runner.DaskRunner"])
    with pytest.raises(run.RunFailed, match=r"^the DaskRunner needs the versions its "
                       r"translation was tested on: apache-beam 2\.78\.0 \(supported "
                       r">=2\.77,<2\.78\); install them"):
        run.local_runner(options)
    dask_versions.check_versions({**versions, "apache-beam": "2.77.0"}.get)  # within range


def test_the_installed_versions_are_supported_and_setup_asks_for_them():
    from pipelines import dask_versions
    dask_versions.check_versions()
    setup = (pathlib.Path(__file__).resolve().parent.parent / "setup.py").read_text()
    for package, supported in dask_versions.SUPPORTED.items():
        extra = "apache-beam[dask]" if package == "apache-beam" else package
        assert setup.count(f'"{extra}{supported}"') == 2, (package, supported)  # dask, test
