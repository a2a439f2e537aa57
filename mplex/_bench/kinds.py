"""The shapes the suite's modules share: a case, its runs, and a target."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

MB = 1_000_000
MIB = 1 << 20


@dataclass
class Run:
    """One way of running a case: an implementation and its arguments."""

    label: str
    impl: str  # mplex, raw, floor, memory, checkpoint, js, pylibp2p, or host-*: see host_command
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
