"""Errors in a run's data: each names the file, the row and the key that fixes it."""

from __future__ import annotations


class DatasetError(ValueError):
    """A data file or row the run cannot use (missing column, overlong prompt, no ground truth, ...)."""


class DataFileNotFoundError(DatasetError, FileNotFoundError):
    """A file listed in data.train_files / data.val_files does not exist."""
