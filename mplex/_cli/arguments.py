"""The types of the command's arguments: each turns the text into a value, or raises
``argparse.ArgumentTypeError`` saying what was expected."""

from __future__ import annotations

import argparse

__all__ = [
    "dial_port",
    "non_negative",
    "port_number",
    "positive",
    "positive_seconds",
    "seconds",
    "whole_number",
]


def whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def positive(text: str) -> int:
    value = whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, not {text}")
    return value


def non_negative(text: str) -> int:
    value = whole_number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, not {text}")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < float("inf"):  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a finite, non-negative number of seconds, not {text}")
    return value


def port_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (a whole number from 0 to 65535)")
    return value


def positive_seconds(text: str) -> float:
    """A number of seconds above 0 (a timeout that cannot be met is no timeout)."""
    value = seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be more than 0 seconds")
    return value


def dial_port(text: str) -> int:
    """A port to dial: 1 to 65535 (0 picks a free port when listening, and means
    nothing when dialling)."""
    value = port_number(text)
    if value == 0:
        raise argparse.ArgumentTypeError("port 0 cannot be dialled (a TCP port from 1 to 65535)")
    return value
