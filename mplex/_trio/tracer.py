"""Tracing a connection's frames: every frame it receives and sends, logged at DEBUG."""

from __future__ import annotations

import logging
from typing import Any

from .._engine.decoder import Decoder, RawFrame
from .._engine.wire import MAX_MESSAGE_SIZE, Flag
from ._util import ConnectionLog, logger

__all__ = ["FrameTracer"]


class FrameTracer:
    """Every frame a connection receives and sends, logged at DEBUG; nothing otherwise.

    It is the protocol's ``FrameTrace`` (given at construction), and the writer tells it
    every byte that leaves, wherever it was written (``sent``), so turning DEBUG on
    changes what is logged, never how or what is sent.  Sent bytes are decoded again
    as they go, so a frame split across writes is traced once, whole.
    """

    __slots__ = ("_label", "_sent")

    def __init__(self, label: str) -> None:
        self._label = label
        #: Decodes what left since tracing began at a frame's start; None while not tracing.
        self._sent: Decoder | None = None

    @property
    def _log(self) -> ConnectionLog:
        # Made for each line traced: one kept would be memory every connection holds.
        return ConnectionLog(self._label)

    def active(self) -> bool:
        return logger.isEnabledFor(logging.DEBUG)

    def received(self, frames: list[RawFrame]) -> None:
        self._frames("recv", frames)

    def received_body(self, header: int, size: int) -> None:
        self._log.debug("recv stream %d (%s) %d bytes of a Message body", header >> 3, _side(header), size)

    def sent(self, data: bytes | bytearray | list[Any], at_frame: bool, size: int) -> None:
        """The first ``size`` bytes of ``data`` (bytes, or a list of buffers written
        together) left for the transport; ``at_frame``: they start at a frame's start.
        Never raises: the writer must not fail because of its own logging."""
        if not logger.isEnabledFor(logging.DEBUG):
            self._sent = None  # once on again, tracing starts afresh at a frame
            return
        try:
            if self._sent is None:
                if not at_frame:
                    self._log.debug("send %d bytes (the rest of a frame begun before tracing)", size)
                    return
                self._sent = Decoder(MAX_MESSAGE_SIZE)
            whole = b"".join(data) if isinstance(data, list) else bytes(data)
            self._frames("send", self._sent.feed_raw(whole[:size]))
        except Exception as exc:
            self._sent = None
            self._log.debug("send %d bytes (not traced: %r)", size, exc)

    def _frames(self, direction: str, frames: list[RawFrame]) -> None:
        """Received Message frames of one stream arrive merged."""
        for header, body in frames:
            flag = header & 7
            name = Flag(flag).name if flag != 7 else "flag 7"
            self._log.debug(
                "%s stream %d (%s) %s %d bytes", direction, header >> 3, _side(header), name, len(body)
            )


def _side(header: int) -> str:
    """Who opened the stream a frame names: odd flags come from the acceptor."""
    return "acceptor" if header & 1 else "opener"
