"""The lifetime stage's models: fitting every registered model the config asks for, and their
files (written and read through Beam's FileSystems; `load_model` reads one back)."""

import json
from typing import Dict, Mapping, NamedTuple

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipelines import progress
from pipelines.stages.lifetime.examples import regression_instances, training_examples
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


def fit_models(split: TimeSplit, config, variant: str = "default") -> Dict[str, FittedModel]:
    """The models the config asks for (registry order), fitted on the training part; a model
    whose fitter finds nothing to learn from is left out, and the log says so (naming the
    feature variant, when the run has several)."""
    of = "" if variant == "default" else f" of variant {variant}"
    labeled = regression_instances(split, config)
    data = TrainingData(split, labeled, training_examples(labeled, split, config),
                        lambda augmentation: training_examples(labeled, split, config,
                                                               augmentation))
    names = [name for name in LIFETIME_MODELS if LIFETIME_MODELS[name].enabled(config)]
    fitted = {}
    for i, name in enumerate(names, 1):
        entry = LIFETIME_MODELS[name]
        with progress.Heartbeat(f"lifetime: training model {name}{of} ({i} of {len(names)}, "
                                f"{len(labeled):,} instances)"):
            fit = entry.fit(entry.build(config), data, config)
        if fit is None:
            progress.report("lifetime: model %s%s not trained: no training instance can be "
                            "labelled for it before the split", name, of)
            continue
        fitted[name] = fit
        progress.count("lifetime.models_trained")
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


class ModelDir(NamedTuple):
    """Where the models go: `final`, the directory `lifetime_models` names (where they are
    once the run publishes), and `staged`, where the run writes them (its staging area;
    `final` itself for a run that is not staged). See pipelines/io/publish.py."""

    final: str
    staged: str

    def of_variant(self, variant: str) -> "ModelDir":
        """Where the models of a feature variant go: its own folder."""
        return ModelDir(FileSystems.join(self.final, variant),
                        FileSystems.join(self.staged, variant))


def save_model(name: str, fitted: FittedModel, model_dir: ModelDir, split_time_us: int) -> dict:
    """Writes a fitted model's files into <model_dir.staged>/<name>; returns its
    LIFETIME_MODELS row, whose path is the final one, <model_dir.final>/<name>."""
    model = fitted.model
    write_model_files(FileSystems.join(model_dir.staged, name), model.to_files())
    metadata = model.metadata()
    return {"name": name, "kind": metadata["kind"],
            "path": FileSystems.join(model_dir.final, name),
            "augmentation": metadata.get("augmentation"),
            "features": list(model.feature_names), "train_instances": fitted.train_instances,
            "train_examples": fitted.rows_fit_on,
            "num_trees": metadata.get("num_trees_trained"),
            "split_time_us": split_time_us, "format_version": metadata["format_version"]}
