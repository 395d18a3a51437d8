"""The release, in one place: the package metadata (pyproject) reads it from here."""

__version__ = "0.1.0"
