"""fleetcast's Beam pipelines, their stages and command line."""

import importlib.metadata


def fleetcast_version() -> str:
    """The installed fleetcast's version."""
    try:
        return importlib.metadata.version("fleetcast")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"
