"""The command's one error type."""

from __future__ import annotations

__all__ = ["CommandError"]


class CommandError(Exception):
    """A failure to report as one line and exit status 1."""
