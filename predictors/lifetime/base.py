"""The base class of the lifetime models, and the files a model is saved as.

A lifetime model follows scikit-learn's conventions:

- the constructor takes keyword parameters only and stores each, unchanged, under its own
  name (`_store_params`; `get_params` reads them back by the constructor's signature);
- `fit(...)` learns from training data and returns the model; what it learns are attributes
  whose names end in "_" (`booster_`, `encoder_`, `curves_`, ...);
- predictions come from `predict_*` methods on the rows `encode(instances)` returns:
  `predict_remaining(features, uptime_s)` (remaining lifetime, seconds) for the regressors,
  `predict_proba_long(features)` for a classifier of long-lived instances.

Files: a model serializes to a dict {file name: bytes} (`to_files`): the files of its
fitted parameters (a LightGBM text model, Kaplan–Meier curves; `FILES` names them) and
`metadata.json` (`metadata()`: the kind, the format version, the constructor parameters as
"config", and what the subclass adds about its fitted state). `save` / `load` keep that dict
in a local directory; the lifetime stage writes the same dict through Beam's FileSystems
(gs://, ...), so a model saved either way loads with the class's `from_files`.
"""

import inspect
import json
import os
from typing import Dict, List, Mapping, Tuple

import numpy as np

FORMAT_VERSION = 1
METADATA_FILE = "metadata.json"

ModelFiles = Dict[str, bytes]


def metadata_bytes(metadata: Mapping) -> bytes:
    """`metadata` as JSON (sorted keys, so equal models give equal files)."""
    return json.dumps(dict(metadata), indent=1, sort_keys=True).encode("utf-8")


def read_metadata(files: Mapping[str, bytes], kind: str) -> dict:
    """The metadata of a model's files, checked to be of `kind` and of this format version.

    Raises:
      ValueError: no metadata, another kind of model, or another format version.
    """
    if METADATA_FILE not in files:
        raise ValueError(f"model files {sorted(files)} lack {METADATA_FILE}")
    metadata = json.loads(files[METADATA_FILE].decode("utf-8"))
    if metadata.get("kind") != kind:
        raise ValueError(f"the files hold a {metadata.get('kind')!r} model, expected {kind!r}")
    if metadata.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"model format version {metadata.get('format_version')}, this code "
                         f"reads {FORMAT_VERSION}")
    return metadata


def write_model_dir(path: str, files: Mapping[str, bytes]) -> None:
    """Writes every file into the local directory `path` (created if needed)."""
    os.makedirs(path, exist_ok=True)
    for name, content in files.items():
        with open(os.path.join(path, name), "wb") as f:
            f.write(content)


def read_model_dir(path: str) -> ModelFiles:
    """Every file of the local directory `path`, by name."""
    if not os.path.isdir(path):
        raise ValueError(f"no model directory at {path}")
    files = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            files[name] = f.read()
    return files


class LifetimeModel:
    """A lifetime model that saves, loads and describes itself (see the module docstring).

    A subclass sets `KIND` and `FILES`, defines `fit`, `encode` and `feature_names`, and
    the three hooks of its fitted state: `_fitted_metadata`, `_parameter_files` and
    `_set_fitted`.
    """

    # The "kind" in metadata.json: which class reads the files.
    KIND = ""
    # The parameter files besides metadata.json that `from_files` requires.
    FILES: Tuple[str, ...] = ()

    @classmethod
    def _param_names(cls) -> List[str]:
        signature = inspect.signature(cls.__init__)
        return [name for name, p in signature.parameters.items()
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name != "self"]

    def _store_params(self, arguments: Mapping) -> None:
        """Stores each constructor parameter, unchanged, under its own name; a constructor
        calls `self._store_params(locals())`."""
        for name in self._param_names():
            setattr(self, name, arguments[name])

    def get_params(self) -> dict:
        """{constructor parameter: value}: `cls(**model.get_params())` is an unfitted copy."""
        return {name: getattr(self, name) for name in self._param_names()}

    def fit(self, *args, **kwargs) -> "LifetimeModel":
        """Learns the fitted attributes from training data; returns self."""
        raise NotImplementedError

    def encode(self, instances) -> np.ndarray:
        """The model's input rows of `instances` (n_instances rows), for its predict methods."""
        raise NotImplementedError

    @property
    def feature_names(self) -> List[str]:
        """The features the fitted model reads."""
        raise NotImplementedError

    def _fitted_metadata(self) -> dict:
        """The JSON-able fitted state that goes into metadata.json besides kind and config."""
        raise NotImplementedError

    def _parameter_files(self) -> ModelFiles:
        """The files of `FILES`, by name."""
        raise NotImplementedError

    def _set_fitted(self, metadata: Mapping, files: Mapping[str, bytes]) -> None:
        """Restores the fitted attributes from what `_fitted_metadata` and
        `_parameter_files` wrote."""
        raise NotImplementedError

    def metadata(self) -> dict:
        """The content of metadata.json: kind, format_version, config (`get_params`) and the
        subclass's fitted state."""
        return {"kind": self.KIND, "config": self.get_params(), **self._fitted_metadata(),
                "format_version": FORMAT_VERSION}

    def to_files(self) -> ModelFiles:
        """The fitted model as files: metadata.json and the parameter files (`FILES`)."""
        return {**self._parameter_files(), METADATA_FILE: metadata_bytes(self.metadata())}

    @classmethod
    def from_files(cls, files: Mapping[str, bytes]) -> "LifetimeModel":
        """The model `to_files` wrote.

        Raises:
          ValueError: files of another kind or format version, or a file missing.
        """
        metadata = read_metadata(files, cls.KIND)
        for name in cls.FILES:
            if name not in files:
                raise ValueError(f"{cls.KIND} model files {sorted(files)} lack {name}")
        model = cls(**metadata["config"])
        model._set_fitted(metadata, files)
        return model

    def save(self, path: str) -> None:
        """Writes `to_files()` into the local directory `path`."""
        write_model_dir(path, self.to_files())

    @classmethod
    def load(cls, path: str) -> "LifetimeModel":
        """The model saved in the local directory `path`."""
        return cls.from_files(read_model_dir(path))
