"""fleetcast's DaskRunner (pipelines/dask_runner.py) on a local in-process Dask cluster: a side
input's upstream runs once, groupings stay within --dask_npartitions, every leaf runs, and each
element comes out once whatever the partitioning."""

import collections
import json
import os
import uuid

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

distributed = pytest.importorskip("distributed")

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
    pipeline.run().wait_until_finish()


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
