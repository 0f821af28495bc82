"""The example configs for the real traces pass `fleetcast validate` as a user runs it, offline:
the Google 2019 JSON config once its shards are where docs/traces.md's download step puts them
(stand-ins here: the synthetic trace in the v3 JSON format under the public shard names), the
BigQuery one without credentials or network (its queries run only with a project)."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.pipeline import PipelineVisitor

import synthetic
from pipelines import config as run_config
from pipelines import run as run_pipeline
from pipelines.io import bigquery
from pipelines.sources import google_v3

REPO = pathlib.Path(__file__).resolve().parent.parent
FLEETCAST = pathlib.Path(sys.executable).parent / "fleetcast"
JSON_CONFIG = REPO / "configs" / "google_2019_json.textproto"
BIGQUERY_CONFIG = REPO / "configs" / "google_2019_bigquery.textproto"
# Where docs/traces.md's gsutil step downloads cell a's shards, relative to the working directory.
CELL_DIR = pathlib.Path("data") / "clusterdata_2019_a"
PUBLIC_DATASET = "`google.com:google-cluster-data`.clusterdata_2019_a."
# The offline environment of CI: no credentials for Google Cloud.
OFFLINE_ENV = {k: v for k, v in os.environ.items() if k != "GOOGLE_APPLICATION_CREDENTIALS"}


def _fleetcast_validate(config: pathlib.Path, cwd, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(FLEETCAST), "validate", *args, str(config)], cwd=cwd,
                          env=OFFLINE_ENV, capture_output=True, text=True, timeout=120)


def _write_public_shards(root: pathlib.Path):
    """The synthetic trace's JSON tables as the bucket names them: TABLE-<12 digits>.json.gz."""
    trace = synthetic.generate(str(root / "trace"), machines=2, days=0.1, shards=2)
    (root / CELL_DIR).mkdir(parents=True)
    for table, paths in trace["paths"].items():
        for index, path in enumerate(paths):
            shutil.copy(path, root / CELL_DIR / f"{table}-{index:012d}.json.gz")


@pytest.mark.slow
def test_google_2019_json_config_validates_with_the_downloaded_shards(tmp_path):
    # Before the download the config is valid, its inputs missing: a warning (an error with
    # --check_inputs).
    missing = _fleetcast_validate(JSON_CONFIG, tmp_path)
    assert missing.returncode == 0
    assert ("fleetcast: warning: " in missing.stderr
            and "google_v3.instance_events.path: no file matches "
            "'data/clusterdata_2019_a/instance_events-*.json.gz'") in missing.stderr
    assert _fleetcast_validate(JSON_CONFIG, tmp_path, "--check_inputs").returncode == 2

    _write_public_shards(tmp_path)
    found = _fleetcast_validate(JSON_CONFIG, tmp_path)
    assert found.returncode == 0, found.stderr
    assert "valid config 'google_2019_json'" in found.stdout


def test_google_2019_bigquery_config_validates_offline_and_queries_the_public_dataset():
    result = _fleetcast_validate(BIGQUERY_CONFIG, REPO)
    assert result.returncode == 0, result.stderr
    assert "valid config 'google_2019_bigquery'" in result.stdout

    config = run_config.load_config(str(BIGQUERY_CONFIG))
    pipeline = beam.Pipeline(options=PipelineOptions(["--project=p"]))
    _ = pipeline | run_pipeline.ReadCanonicalTables(config, "/unused")
    queries = []

    class CollectBigQueryReads(PipelineVisitor):
        def enter_composite_transform(self, node):
            if isinstance(node.transform, bigquery.ReadBigQueryRows):
                queries.append(node.transform._query)

    pipeline.visit(CollectBigQueryReads())
    tables = ("instance_events", "instance_usage", "machine_events", "collection_events")
    read = [re.search(r" FROM (\S+)", q)[1].removeprefix(PUBLIC_DATASET) for q in queries]
    assert sorted(read) == sorted(tables)
    # Each query scans only the columns the source parses (BigQuery bills by column bytes).
    for table, query in zip(read, queries):
        selected = re.match(r"SELECT (.*?) FROM", query)[1].split(", ")
        assert tuple(selected) == google_v3.BIGQUERY_COLUMNS[table]
    # Every table is cut to the same machine subset and to the first 3 days.
    for query in queries:
        assert "MOD(ABS(FARM_FINGERPRINT(CAST(machine_id AS STRING))), 100) = 0" in query
        assert "< 259800000000" in query
