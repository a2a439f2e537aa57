"""The shapes the suite's modules share: a case, its runs, a target, and the medians
targets are computed from."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

MB = 1_000_000
MIB = 1 << 20


@dataclass
class Run:
    """One way of running a case: an implementation and its arguments."""

    label: str
    impl: str  # mplex, raw, floor, floor-api, memory, checkpoint, js, pylibp2p, or host-*: see host_command
    args: dict[str, Any]
    metric: str = "seconds"  # which client field the case reports
    #: A baseline known not to complete the case: after this many seconds its row says
    #: so, instead of failing the suite (0: it must complete).
    gives_up_after: float = 0


@dataclass
class Case:
    name: str
    what: str
    runs: list[Run]
    results: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


class CaseLike(Protocol):
    name: str
    what: str
    results: dict[str, list[dict[str, Any]]]


Measure = Callable[[Sequence[CaseLike]], tuple[float, float] | None]
Target = tuple[str, Measure, str, str]
# (description, measure -> (value, limit) or None when a baseline is missing, "min"/"max", unit)


def median_of(suite: Sequence[CaseLike], case: str, label: str, metric: str) -> float | None:
    """The median of ``metric`` over the runs of ``label`` in ``case``; None if not run."""
    for c in suite:
        if c.name == case and label in c.results:
            return float(statistics.median(r[metric] for r in c.results[label]))
    return None


def throughput(suite: Sequence[CaseLike], case: str, label: str) -> float | None:
    """Bytes (or requests) per second, median over runs; None if not run."""
    for c in suite:
        if c.name == case and label in c.results:
            runs = c.results[label]
            key = "bytes" if "bytes" in runs[0] else "requests"
            return float(statistics.median(r[key] / r["seconds"] for r in runs))
    return None
