"""The scheduler pass that lets a connection's frames settle, kept for every
connection of a trio run by one instrument (``Settler``).

Frames that are not a conversation's message (a NewStream, a Close, a reply to a
peer that has finished sending) are mostly followed by more from the same task, which
writes them all in one piece as it ends its sending or waits for the peer
(``Writer.send_owed``).  In case it does neither, the writer must write them itself
once that task has had a scheduler pass of its own.

A pass ends where trio is about to wait for I/O, which it tells instruments
(``trio.abc.Instrument.before_io_wait``).  So the settler looks there, at the end of
every pass, at the writers enlisted since (``add``), at no cost to a pass that has
none:

* a writer whose frames have left is told at once (``WriterTask.after_pass``): its
  task wrote them, the usual case;
* a writer whose frames are still queued is looked at again at the end of the next
  pass, by which time its task has surely had a step of its own, and told then;
* if no task is ready to run, nothing will write them before trio waits, so every
  writer with frames queued is told now (trio may be about to decide that the program
  is idle, ``trio.testing.wait_all_tasks_blocked``, or to sleep).

Telling a writer may wake its task, which trio would then leave waiting until the
timeout it chose before asking us; so when the wait has a timeout, the writers are
told from a callback that ends the wait (``TrioToken.run_sync_soon``).

Where a connection's own task would wake for each request to keep that pass, the
settler costs a request a list append and a look: no task step, no scheduler wake-up,
however many connections.  The instrument is added to the run with its first running
connection and removed with its last (never process-wide).
"""

from __future__ import annotations

import contextlib
from typing import Protocol

import trio

__all__ = ["SettledWriter", "Settler"]


class SettledWriter(Protocol):
    """What the settler needs of a writer (``WriterTask``)."""

    def settling_frames(self) -> bool:
        """True while the frames it let settle are still queued."""

    def after_pass(self) -> None:
        """The pass went by: write what is still queued."""


_SETTLER: trio.lowlevel.RunVar[Settler | None] = trio.lowlevel.RunVar("mplex.settler", default=None)


class Settler(trio.abc.Instrument):
    """The settling pass of every connection of one trio run (see the module docstring)."""

    __slots__ = ("_enlisted", "_looked", "_members", "_token")

    def __init__(self) -> None:
        self._members = 0
        self._token = trio.lowlevel.current_trio_token()
        # Enlisted during the current pass; still settling at the end of the last one.
        self._enlisted: list[SettledWriter] = []
        self._looked: list[SettledWriter] = []

    @staticmethod
    def join() -> Settler:
        """The run's settler, for one more running connection (``leave`` when it ends)."""
        settler = _SETTLER.get()
        if settler is None:
            settler = Settler()
            _SETTLER.set(settler)
            trio.lowlevel.add_instrument(settler)
        settler.enter()
        return settler

    def enter(self) -> None:
        self._members += 1

    def leave(self) -> None:
        """A connection ended; with the last, the instrument leaves the run."""
        self._members -= 1
        if self._members:
            return
        if _SETTLER.get() is self:
            _SETTLER.set(None)
        self._enlisted, self._looked = [], []
        with contextlib.suppress(KeyError):  # (trio drops an instrument that raised)
            trio.lowlevel.remove_instrument(self)

    def add(self, writer: SettledWriter) -> None:
        """``writer`` let frames settle: tell it after its task has had a pass."""
        self._enlisted.append(writer)

    def before_io_wait(self, timeout: float) -> None:
        """A pass ends: see the module docstring.  Never raises (trio would drop us)."""
        if not self._enlisted and not self._looked:
            return
        looked, enlisted = self._looked, self._enlisted
        self._looked, self._enlisted = [], []
        due = []
        for writer in looked:
            if writer.settling_frames():
                due.append(writer)
            else:
                writer.after_pass()  # its task wrote them: nothing to wake
        idle: bool | None = None  # (asked of trio once, if needed)
        for writer in enlisted:
            if not writer.settling_frames():
                writer.after_pass()
                continue
            if idle is None:
                idle = timeout > 0 or not trio.lowlevel.current_statistics().tasks_runnable
            if idle:
                due.append(writer)
            else:
                self._looked.append(writer)
        if not due:
            return
        if timeout > 0:
            self._token.run_sync_soon(_tell, due)
        else:
            _tell(due)


def _tell(writers: list[SettledWriter]) -> None:
    for writer in writers:
        writer.after_pass()
