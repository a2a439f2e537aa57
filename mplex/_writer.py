"""The connection's send side: the writer task, control frames, direct writes.

Streams append whole frames to the ``SendQueue``; the **writer** task takes what the
queue's flush policy hands it and writes it to the transport (over the socket path
through the descriptor, see ``_socket_path``).  Control frames (NewStream, Close,
Reset) go through ``send_control`` and the one ``Encoder``.  Over the socket path a
large send may go to the kernel from the sending task (``write_directly``) when
nothing else is queued, so order holds.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from ._engine.stats import Counters
from ._engine.wire import Encoder, Flag
from ._logging import ConnectionLog, logger
from ._sendqueue import SendQueue
from ._socket_path import SocketPath

__all__ = ["Writer"]


async def _no_failure_handler(exc: Exception) -> None:
    pass


class Writer:
    """The send side of one connection; ``run()`` is the writer task.

    ``may_send()`` is the connection's word on whether anything may still be queued;
    ``on_failure(exc)`` is awaited in the writer task once a write failed.
    """

    def __init__(
        self,
        transport: trio.abc.Stream,
        socket: SocketPath | None,
        *,
        queue: SendQueue,
        encoder: Encoder,
        stats: Counters,
        log: ConnectionLog,
        may_send: Callable[[], bool],
        on_failure: Callable[[Exception], Awaitable[None]],
    ) -> None:
        self._send_all = transport.send_all if socket is None else socket.send_all
        self._socket = socket
        self._queue = queue
        self._encoder = encoder
        self._stats = stats
        self._log = log
        self._may_send = may_send
        self._on_failure = on_failure

    async def run(self) -> None:
        """Write batches until a write fails (then hand the failure on)."""
        send_all = self._send_all
        queue = self._queue
        while True:
            data, skip = await queue.next_batch()
            if logger.isEnabledFor(logging.DEBUG):  # one check per write, none per frame
                self._log.trace_sent(data, skip)
            queue.writing = True
            try:
                await send_all(data)
            except Exception as exc:  # any failure of any transport: the send side is lost
                queue.writing = False
                await self._on_failure(exc)
                return
            finally:
                queue.writing = False
            queue.sent(len(data))
            queue.batch_written()

    def detach(self) -> None:
        """Drop the failure callback (it holds the connection): the writer has ended."""
        self._on_failure = _no_failure_handler

    def send_control(self, stream_id: int, flag: Flag, body: bytes = b"") -> None:
        """Queue a control frame (NewStream, Close, Reset): it goes out whatever the
        send buffer holds.  Nothing is queued once the send side has ended."""
        if not self._may_send():
            return
        if flag >= Flag.RESET_RECEIVER:
            self._stats.resets_sent += 1
        self._queue.append_control(self._encoder.frame(stream_id, flag, body))

    def may_write_directly(self) -> bool:
        """True if a large send may go to the TCP socket from the sending task (when
        nothing is queued or being written, so order holds): the socket path is on,
        the send side is open, and frames are not being traced."""
        return (
            self._socket is not None
            and self._may_send()
            and not logger.isEnabledFor(logging.DEBUG)  # the writer traces frames
        )

    def write_directly(self, stream_id: int, flag: Flag, view: memoryview, pos: int) -> int:
        """Frames of ``view[pos:]`` to the socket from the calling task (the caller
        checked ``may_write_directly``); return how far in ``view`` they reach.
        Whatever the kernel did not take is queued, whole, for the writer."""
        assert self._socket is not None
        encoder = self._encoder
        pos, frames = self._socket.write_frames(
            lambda size: encoder.prefix(stream_id, flag, size), encoder.frame_size, view, pos
        )
        if self._queue.buffer:
            self._queue.queued(frames)
        else:
            self._queue.frames += frames
        return pos
