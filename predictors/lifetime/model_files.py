"""Lifetime models as a set of named files: parameters plus metadata (issue 4, item 2).

Every lifetime model serializes to a dict {file name: bytes}: its parameters (a LightGBM
text model, or Kaplan–Meier curves) and `metadata.json` (kind, format version, training
config, features, category maps, cap). `write_model_dir` / `read_model_dir` keep that dict
in a local directory; the pipeline writes the same dict through Beam's FileSystems (gs://,
...), so a model saved either way loads with the model class's `from_files`.
"""

import json
import os
from typing import Dict, Mapping

FORMAT_VERSION = 1
METADATA_FILE = "metadata.json"

ModelFiles = Dict[str, bytes]


def metadata_bytes(metadata: Mapping) -> bytes:
    """`metadata` with the format version, as JSON (sorted keys, so equal models give equal
    files)."""
    return json.dumps({**metadata, "format_version": FORMAT_VERSION}, indent=1,
                      sort_keys=True).encode("utf-8")


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
