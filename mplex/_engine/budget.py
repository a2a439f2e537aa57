"""Abuse budgets: how many suspicious events a peer may cause per sliding window (sans-IO).

Each budget counts one kind of event (frames for streams that never existed, opens we
had to refuse, resets) over a sliding window, approximated the usual way with two
fixed buckets: the previous bucket's count weighted by how much of it still overlaps
the window, plus the current one.  O(1) time and memory per event, whatever the rate.
The caller passes the time in; nothing here reads a clock.
"""

from __future__ import annotations

from .config import Config
from .errors import ProtocolError

__all__ = ["AbuseBudgets", "SlidingBudget"]


class SlidingBudget:
    """At most ``limit`` events per ``window`` seconds."""

    __slots__ = ("_current", "_previous", "_start", "limit", "name", "window")

    def __init__(self, name: str, limit: int, window: float) -> None:
        self.name = name
        self.limit = limit
        self.window = window
        self._start = 0.0
        self._current = 0
        self._previous = 0

    def add(self, now: float) -> bool:
        """Count one event at time ``now``; return False once the budget is exceeded."""
        elapsed = now - self._start
        if elapsed >= self.window:
            buckets = int(elapsed // self.window)
            self._previous = self._current if buckets == 1 else 0
            self._current = 0
            self._start += buckets * self.window
            elapsed = now - self._start
        self._current += 1
        return self.estimate(now) <= self.limit

    def spend(self, now: float) -> None:
        """``add``, raising ``ProtocolError`` (naming the budget's setting) once it is
        exceeded."""
        if not self.add(now):
            raise ProtocolError(
                f"abuse budget exceeded: more than {self.limit} events counted by "
                f"Config.{self.name} within {self.window:g} s"
            )

    def estimate(self, now: float) -> float:
        """Events in the window ending at ``now`` (previous bucket weighted by overlap)."""
        overlap = max(0.0, 1.0 - (now - self._start) / self.window)
        return self._previous * overlap + self._current


class AbuseBudgets:
    """One connection's budgets, each named after the ``Config`` setting that sets it.

    A budget is made when its first event comes: most connections never see one, and
    every connection would otherwise hold all four."""

    __slots__ = ("_config", "ignored", "refused", "reset", "unknown")

    #: Frames for streams that never existed.
    unknown: SlidingBudget
    #: Streams we had to refuse.
    refused: SlidingBudget
    #: Resets received.
    reset: SlidingBudget
    #: Frames that changed nothing (empty, repeated, late, after the peer's Close).
    ignored: SlidingBudget

    def __init__(self, config: Config) -> None:
        self._config = config

    def __getattr__(self, name: str) -> SlidingBudget:
        # Called only for a budget not made yet (a set slot is found first).
        setting = _SETTINGS.get(name)
        if setting is None:
            raise AttributeError(name)
        config = self._config
        budget = SlidingBudget(setting, getattr(config, setting), config.abuse_window)
        setattr(self, name, budget)
        return budget


#: Each budget's ``Config`` setting.
_SETTINGS = {
    "unknown": "max_unknown_stream_frames",
    "refused": "max_refused_streams",
    "reset": "max_resets_received",
    "ignored": "max_ignored_frames",
}
