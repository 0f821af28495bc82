"""The lifetime models are published with the run's tables: staged while the run runs (the
placement stage of the same run loads them from there), renamed into place and listed in
the manifest when it succeeds, never touched by a run that fails."""

import hashlib
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pipelines.stages.placement.stage as placement_stage
from pipelines import schemas
from pipelines.io import publish
from pipelines.stages.lifetime.models import load_model
from tests.helpers import (
    JOB_LIFETIME_MACHINES,
    JOB_LIFETIME_STAGE_TEXT,
    job_lifetime_instances,
    run_text_config,
)

PLACEMENT_TEXT = ("policy: BEST_FIT policy: NILAS lifetime_source { uptime_model: true } "
                  "warmup_s: 21600 sample_period_s: 1800 seed: 5")
MODEL_NAMES = ("la_classifier", "lava_class_10h", "lava_class_1h", "uptime", "uptime_long_lived")


def _hashes(directory):
    """{path relative to `directory`: sha256} of every file under it."""
    files = {}
    for parent, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(parent, name)
            with open(path, "rb") as handle:
                files[os.path.relpath(path, directory)] = hashlib.sha256(handle.read()).hexdigest()
    return files


def _write_inputs(root):
    """The instances and machines as Parquet inputs under `root` (LoadOrWrite input)."""
    for table, rows in (("instances", job_lifetime_instances(num_vms=300)),
                        ("machines", JOB_LIFETIME_MACHINES)):
        directory = root / f"in_{table}"
        directory.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(rows, schema=schemas.CANONICAL[table]),
                       directory / "part-0.parquet")


def _run(root, model_dir, lifetime_text=JOB_LIFETIME_STAGE_TEXT):
    """Runs the lifetime stage and a placement with the uptime model into root/out."""
    lifetime = lifetime_text + (f' model_dir: "{model_dir}"' if model_dir else "")
    loads = "\n".join(f'{t} {{ input {{ parquet: "{root}/in_{t}" }} }}'
                      for t in ("instances", "machines"))
    return run_text_config(f'name: "models_test"\n{loads}\nlifetime_model {{ {lifetime} }}\n'
                           f"placement {{ {PLACEMENT_TEXT} }}", root / "out")


def _failing_after_the_replays(out, model_dir, record):
    """A replacement of the placement stage's last step that fails the run, after writing to
    `record` (a JSON file: runners pickle the step) what the staging area and the models'
    final directory hold then."""
    def fail(element):
        record.write_text(json.dumps({
            "staged": _hashes(out / publish.STATE_DIR / "staging"),
            "final": _hashes(model_dir)}))
        raise RuntimeError("injected failure after the replays")
    return fail


@pytest.mark.parametrize("inside_the_output", [True, False])
def test_models_are_published_with_the_run_and_a_failed_run_leaves_them(
        tmp_path, monkeypatch, inside_the_output):
    out = tmp_path / "out"
    model_dir = out / "models" if inside_the_output else tmp_path / "elsewhere" / "models"
    _write_inputs(tmp_path)
    tables = _run(tmp_path, None if inside_the_output else model_dir)

    models = tables["lifetime_models"].set_index("name")
    assert sorted(models.index) == list(MODEL_NAMES)
    assert models["path"].to_dict() == {n: str(model_dir / n) for n in MODEL_NAMES}
    assert load_model(models.loc["uptime", "path"]).metadata()["kind"] == "uptime_lifetime_model"
    summary = tables["placement_summary"]
    assert sorted(summary["lifetime_source"]) == ["uptime_model", "uptime_model"]
    assert (summary["placed_vms"] > 0).all()
    manifest = json.loads((out / publish.MANIFEST).read_text())
    published = _hashes(model_dir)
    # Paths under the output are relative to it ("files"); others absolute ("outside").
    prefix, listed = (("models/", manifest["files"]) if inside_the_output
                      else (f"{model_dir}/", manifest["outside"]))
    assert {p.split("/")[0] for p in published} == set(MODEL_NAMES)
    assert sorted(f for f in listed if f.startswith(prefix)) == sorted(
        prefix + f for f in published)
    assert not os.listdir(out / publish.STATE_DIR / "staging")

    # A second run into the same output, with other models (fewer trees), fails after the
    # replays: the first run's models and manifest stay as they were; this run's models were
    # staged, not written in place.
    record = tmp_path / "during_the_failed_run.json"
    monkeypatch.setattr(placement_stage, "with_baseline_differences",
                        _failing_after_the_replays(out, model_dir, record))
    with pytest.raises(Exception, match="injected failure after the replays"):
        _run(tmp_path, None if inside_the_output else model_dir,
             JOB_LIFETIME_STAGE_TEXT.replace("num_trees: 20", "num_trees: 7"))
    seen = json.loads(record.read_text())
    staged_models = {f.split("/uptime/")[1]: h for f, h in seen["staged"].items()
                     if "/uptime/" in f}
    first_models = {f[len("uptime/"):]: h for f, h in published.items()
                    if f.startswith("uptime/")}
    assert sorted(staged_models) == sorted(first_models)
    assert staged_models != first_models
    assert seen["final"] == published
    assert _hashes(model_dir) == published
    assert json.loads((out / publish.MANIFEST).read_text()) == manifest
    assert not os.listdir(out / publish.STATE_DIR / "staging")


def test_a_directory_on_another_file_system_is_written_in_place(tmp_path):
    area = publish.StagingArea(str(tmp_path), "run")
    assert area.staged_dir("gs://bucket/models") == "gs://bucket/models"
    local = area.staged_dir(str(tmp_path / "models"))
    assert local == str(tmp_path / publish.STATE_DIR / "staging" / "run" / "models")
    elsewhere = area.staged_dir("/other/models")
    assert elsewhere == str(tmp_path / publish.STATE_DIR / "staging" / "run"
                            / f"{publish.STATE_DIR}-copies" / "1")
    assert area.staged_dirs() == {str(tmp_path / "models"): local, "/other/models": elsewhere}


def test_staged_path_maps_a_final_path_to_where_the_run_writes_it():
    dirs = {"/out/models": "/out/.fleetcast/staging/r/models"}
    assert publish.staged_path("/out/models/uptime", dirs) == \
        "/out/.fleetcast/staging/r/models/uptime"
    assert publish.staged_path("/out/models", dirs) == "/out/.fleetcast/staging/r/models"
    assert publish.staged_path("/out/models2/uptime", dirs) == "/out/models2/uptime"
    assert publish.staged_path("gs://b/models/uptime", dirs) == "gs://b/models/uptime"
    assert publish.staged_path("/out/models/uptime", {}) == "/out/models/uptime"
