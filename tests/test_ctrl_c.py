"""Ctrl-C at any point where the library is running ends the run with
``KeyboardInterrupt``, and with nothing else.

A real Ctrl-C runs trio's SIGINT handler at the next point where Python looks for
signals.  trio then raises ``KeyboardInterrupt`` right there, unless that code is
protected (trio's own primitives are), in which case the interrupt goes to the main
task at its next checkpoint.  The muxer's tasks and the methods of its streams and of
``Muxer`` are protected in the same way, because a ``KeyboardInterrupt`` in the middle
of their bookkeeping (a task half parked, a frame half queued) would leave a task to be
woken after it ended: trio then fails with ``TrioInternalError``, or a nursery waits
for ever.

Here the handler is called at each such point in turn (every point with
``MPLEX_FULL=1``, every ``STRIDE``-th otherwise), each time in a new ``trio.run`` of the
same request/response workload, over every transport.  The muxers run in a task of
their own, not in the main task: trio's ``StapledStream`` and ``SSLStream`` can lose an
interrupt delivered while ``trio.aclose_forcefully`` closes them, which would be
trio's doing, not ours.
"""

from __future__ import annotations

import faulthandler
import gc
import os
import pathlib
import signal
import sys
import types
from collections.abc import Callable
from typing import Any

import trio
import trio.testing

import mplex
from tests.helpers import over_every_transport, read_all

LIBRARY = str(pathlib.Path(mplex.__file__).resolve().parent)
#: Every ``STRIDE``-th point (see ``CtrlC``) of the workload gets a Ctrl-C.
STRIDE = 1 if os.environ.get("MPLEX_FULL") else 23
REQUESTS = b"x" * 33
#: Seconds one run may take (it takes a fraction of one) before the process is ended.
RUN_LIMIT = 60


async def _echo(stream: mplex.MplexStream) -> None:
    await stream.send_all(await read_all(stream))


async def _requests(transport: Callable[[], Any]) -> None:
    """Two workers, three requests each, a stream per request, against
    ``serve_connection``: opening, sending, half-closing, reading to EOF, accepting,
    serving, and closing both muxers at the end."""
    async with transport() as (client_end, server_end), trio.open_nursery() as server:
        server.start_soon(mplex.serve_connection, _echo, server_end)
        async with mplex.open_muxer(client_end) as client:

            async def worker() -> None:
                for _ in range(3):
                    async with await client.open_stream() as stream:
                        await stream.send_all(REQUESTS)
                        await stream.send_eof()
                        assert await read_all(stream) == REQUESTS

            async with trio.open_nursery() as workers:
                for _ in range(2):
                    workers.start_soon(worker)
        server.cancel_scope.cancel()


async def _workload(transport: Callable[[], Any]) -> None:
    with trio.fail_after(20):  # a Ctrl-C that left something waiting forever fails here
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_requests, transport)


class CtrlC:
    """A trace function that presses Ctrl-C at the ``at``-th point (never, for 0)
    where Python would run the SIGINT handler while the library is on the stack: it
    calls the handler trio installed, with that point's frame, as Python does when
    the signal arrives there.

    Python runs signal handlers only at some instructions: the start of a function,
    the return to a ``yield`` (where trio resumes a task), and a loop's jump back.
    Elsewhere (a line that starts with a ``NOP``, the exit of an ``async with``) an
    exception raised by a trace function could do what no signal can, such as skip
    a nursery's ``__aexit__``.
    """

    def __init__(self, at: int) -> None:
        self.at = at
        self.points = 0
        self.pressed_in: str | None = None

    def trace(self, frame: types.FrameType, event: str, arg: object) -> Any:
        if self.pressed_in is not None:
            return None
        code = frame.f_code
        # A ``call`` event is at a RESUME; its argument is 0 at the start of a
        # function and 1 after a ``yield``, where Python checks for signals (2 and 3
        # are after ``yield from`` and ``await``, where it does not).
        if code.co_code[frame.f_lasti + 1] < 2 and _under_the_library(frame):
            self._point(frame)
        if code.co_filename.startswith(LIBRARY):
            return self._lines(frame.f_lasti)
        return None

    def _lines(self, last: int) -> Callable[[types.FrameType, str, object], Any]:
        """A frame's own tracer: a line reached by jumping back is a loop's next turn."""

        def line(frame: types.FrameType, event: str, arg: object) -> Any:
            nonlocal last
            if event == "line" and self.pressed_in is None:
                if frame.f_lasti < last:
                    self._point(frame)
                last = frame.f_lasti
            return line

        return line

    def _point(self, frame: types.FrameType) -> None:
        self.points += 1
        if self.points == self.at:
            # No sys.settrace(None) here: it would free the bound method that the
            # interpreter is still calling (seen to crash CPython 3.11).
            self.pressed_in = f"{frame.f_code.co_qualname} line {frame.f_lineno}"
            handler = signal.getsignal(signal.SIGINT)
            assert callable(handler) and handler is not signal.default_int_handler
            handler(signal.SIGINT, frame)


def _under_the_library(frame: types.FrameType | None) -> bool:
    """Whether a frame of the library is ``frame`` or one of its callers, with no
    garbage-collector callback between (hypothesis installs one): CPython ignores an
    exception raised in a gc callback, so a Ctrl-C there is lost whoever is below."""
    callbacks = {getattr(callback, "__code__", None) for callback in gc.callbacks}
    while frame is not None:
        if frame.f_code in callbacks:
            return False
        if frame.f_code.co_filename.startswith(LIBRARY):
            return True
        frame = frame.f_back
    return False


def run_pressing(transport: Callable[[], Any], at: int) -> tuple[CtrlC, BaseException | None]:
    """The workload in a new ``trio.run``, with Ctrl-C at point ``at``; what it raised."""
    ctrl_c = CtrlC(at)
    previous = sys.gettrace()  # a coverage tool's, say: back after the run
    sys.settrace(ctrl_c.trace)  # until the end of the run: see CtrlC._point
    # A task that was never scheduled cannot be cancelled, so a nursery waiting for
    # one outlasts any fail_after: such a hang ends the process, with every thread's
    # stack on stderr (pytest -s shows it).
    faulthandler.dump_traceback_later(RUN_LIMIT, exit=True)
    try:
        trio.run(_workload, transport)
    except BaseException as exc:  # whatever leaves trio.run is the result
        return ctrl_c, exc
    finally:
        faulthandler.cancel_dump_traceback_later()
        sys.settrace(previous)
    return ctrl_c, None


def only_keyboard_interrupts(exc: BaseException | None) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(KeyboardInterrupt)[1] is None
    return isinstance(exc, KeyboardInterrupt)


@over_every_transport
def test_ctrl_c_at_any_point_in_the_library_ends_the_run_with_keyboard_interrupt(
    transport: Callable[[], Any],
) -> None:
    # The count of points differs from run to run (trio shuffles each batch of
    # runnable tasks): the fewest of three runs is the range, and a run whose point
    # is never reached counts for nothing.
    undisturbed = []
    for _ in range(3):
        ctrl_c, result = run_pressing(transport, 0)
        assert result is None and ctrl_c.pressed_in is None, result
        undisturbed.append(ctrl_c.points)
    points = range(1, min(undisturbed) + 1, STRIDE)
    assert len(points) * STRIDE > 1000, undisturbed
    failures: list[str] = []
    pressed = 0
    for at in points:
        ctrl_c, result = run_pressing(transport, at)
        if ctrl_c.pressed_in is None:
            continue
        pressed += 1
        if not only_keyboard_interrupts(result):
            failures.append(f"Ctrl-C in {ctrl_c.pressed_in} (point {at}): {result!r}")
    assert not failures, "\n".join(failures[:10])
    assert pressed > 0.8 * len(points), (pressed, len(points))


async def test_the_programs_own_code_stays_interruptible() -> None:
    """The protection covers the library's code, never the program's: a handler and
    the body of ``async with`` run as trio runs any task, where Ctrl-C interrupts."""
    seen: dict[str, bool] = {}
    done = trio.Event()

    async def handler(stream: mplex.MplexStream) -> None:
        seen["handler"] = trio.lowlevel.currently_ki_protected()
        done.set()

    client_end, server_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(mplex.serve_connection, handler, server_end)
        async with mplex.open_muxer(client_end) as client:
            seen["block"] = trio.lowlevel.currently_ki_protected()
            async with await client.open_stream():
                await done.wait()
        nursery.cancel_scope.cancel()
    assert seen == {"handler": False, "block": False}
