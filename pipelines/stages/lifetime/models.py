"""The lifetime stage's models: fitting every registered model the config asks for, and their
files (written and read through Beam's FileSystems; `load_model` reads one back)."""

import json
from typing import Dict, Mapping

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipelines.stages.lifetime.examples import examples_of, regression_instances
from predictors.lifetime.base import METADATA_FILE, ModelFiles
from predictors.lifetime.examples import (
    TimeSplit,
)
from predictors.lifetime.registry import (
    LIFETIME_MODELS,
    FittedModel,
    TrainingData,
    model_classes,
)


def fit_models(split: TimeSplit, config) -> Dict[str, FittedModel]:
    """The models the config asks for (registry order), fitted on the training part."""
    labeled = regression_instances(split, config)
    data = TrainingData(split, labeled, examples_of(labeled, split.split_time_us, config),
                        lambda augmentation: examples_of(labeled, split.split_time_us, config,
                                                         augmentation))
    fitted = {}
    for name in LIFETIME_MODELS:
        entry = LIFETIME_MODELS[name]
        if entry.enabled(config):
            fitted[name] = entry.fit(entry.build(config), data, config)
    return fitted


def write_model_files(path: str, files: Mapping[str, bytes]) -> None:
    """Writes a model's files into the directory `path` (any file system Beam knows)."""
    for name, content in files.items():
        with FileSystems.create(FileSystems.join(path, name),
                                compression_type=CompressionTypes.UNCOMPRESSED) as f:
            f.write(content)


def read_model_files(path: str) -> ModelFiles:
    """Every file of the model directory `path`, by name."""
    matches = FileSystems.match([FileSystems.join(path, "*")])[0].metadata_list
    files = {}
    for match in matches:
        with FileSystems.open(match.path,
                              compression_type=CompressionTypes.UNCOMPRESSED) as f:
            files[FileSystems.split(match.path)[1]] = f.read()
    return files


def load_model(path: str):
    """The lifetime model saved in the directory `path` (a `path` of `lifetime_models`),
    of the class its metadata names; local or on any file system Beam knows."""
    files = read_model_files(path)
    if METADATA_FILE not in files:
        raise ValueError(f"no lifetime model at {path}: {METADATA_FILE} is missing")
    kind = json.loads(files[METADATA_FILE].decode("utf-8")).get("kind")
    classes = model_classes()
    if kind not in classes:
        raise ValueError(f"{path} holds a model of unknown kind {kind!r}; known: "
                         f"{sorted(classes)}")
    return classes[kind].from_files(files)


def save_model(name: str, fitted: FittedModel, model_dir: str, split_time_us: int) -> dict:
    """Writes a fitted model's files into <model_dir>/<name>; returns its LIFETIME_MODELS
    row."""
    path = FileSystems.join(model_dir, name)
    model = fitted.model
    write_model_files(path, model.to_files())
    metadata = model.metadata()
    return {"name": name, "kind": metadata["kind"], "path": path,
            "augmentation": metadata.get("augmentation"),
            "features": list(model.feature_names), "train_instances": fitted.train_instances,
            "train_examples": fitted.rows_fit_on,
            "num_trees": metadata.get("num_trees_trained"),
            "split_time_us": split_time_us, "format_version": metadata["format_version"]}
