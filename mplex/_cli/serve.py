"""``mplex serve``: echo, discard or source on every inbound stream."""

from __future__ import annotations

import argparse
import itertools
import signal
from functools import partial
from typing import Any

import trio

from .._trio.serving import serve_listeners
from .._trio.stream import MplexStream
from .capture import CapturingListener
from .errors import CommandError

__all__ = ["serve_command"]


def serve_command(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C (exit status 130, as for every subcommand) or SIGTERM (0, a
    clean stop); 1 if the port cannot be had."""
    return trio.run(_serve, args)


async def _serve(args: argparse.Namespace) -> int:
    try:
        listeners = await trio.open_tcp_listeners(args.port, host=args.host)
    except OSError as exc:
        raise CommandError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
    host, port = listeners[0].socket.getsockname()[:2]
    served: list[trio.abc.Listener[Any]] = list(listeners)
    if args.capture is not None:
        numbers = itertools.count(1)
        served = [CapturingListener(listener, args.capture, numbers) for listener in listeners]
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            handler = partial(_handle_stream, mode=args.mode, size=args.size)
            nursery.start_soon(partial(serve_listeners, handler, served, negotiate=args.negotiate))
            print(f"mplex: serving {args.mode} on {host}:{port}", flush=True)
            async for number in signals:  # Ctrl-C or SIGTERM: stop serving, exit quietly
                nursery.cancel_scope.cancel()
                return 128 + signal.SIGINT if number == signal.SIGINT else 0
    return 0  # (the signal receiver never ends by itself)


async def _handle_stream(stream: MplexStream, mode: str, size: int) -> None:
    async with stream:
        if mode == "echo":
            while data := await stream.receive_some():
                await stream.send_all(data)
        elif mode == "discard":
            await _drain(stream)
        else:  # source: send `size` bytes (reading and dropping what arrives), then close
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_drain, stream)
                chunk = bytes(range(256)) * 256
                for start in range(0, size, len(chunk)):
                    await stream.send_all(chunk[: min(len(chunk), size - start)])
                await stream.send_eof()


async def _drain(stream: MplexStream) -> None:
    while await stream.receive_some():
        pass
