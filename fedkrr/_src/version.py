"""The installed distribution's version, defined once (``pyproject.toml``)."""

from importlib import metadata


def installed_version(distribution: str = "fedkrr") -> str:
  """The version of ``distribution`` as installed; ``"0+unknown"`` when run from a bare checkout.
  """
  try:
    return metadata.version(distribution)
  except metadata.PackageNotFoundError:
    return "0+unknown"
