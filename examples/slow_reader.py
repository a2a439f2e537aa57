"""What each slow-reader policy does when a stream's reader falls behind.

mplex has no flow control: a peer can send faster than we read.  On one connection,
stream A is flooded while its reader is stalled for 0.6 s; meanwhile stream B does a
quick echo.  Per policy:

* "block": the muxer stops reading the connection until A's reader catches up.
  Nothing is lost; B waits behind A (mplex's head-of-line blocking).
* "reset": A is reset as soon as it is too far behind, and its unread data is freed
  (so its reader, back after 0.6 s, gets the reset at once); B is unaffected.
* "block-then-reset": like "block" for slow_reader_timeout (0.3 s here), then A is
  reset and its unread data freed, and B goes on.
"""

import trio

import mplex

FLOOD = 400_000  # bytes sent on stream A


async def run(policy: mplex.SlowReaderPolicy) -> None:
    config = mplex.Config(
        max_stream_buffer=64 * 1024,
        max_connection_buffer=128 * 1024,
        slow_reader_policy=policy,
        slow_reader_timeout=0.3,
    )
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listeners[0].accept()
    async with mplex.open_muxer(client) as sender, mplex.open_muxer(server, config) as receiver:
        flood = await sender.open_stream("A")
        echo = await sender.open_stream("B")
        slow, quick = await receiver.accept_stream(), await receiver.accept_stream()
        outcome = {}
        async with trio.open_nursery() as nursery:

            async def send_flood() -> None:
                try:
                    await flood.send_all(b"x" * FLOOD)
                    await flood.send_eof()
                except mplex.StreamReset:
                    pass  # the receiver gave up on A

            async def read_slowly() -> None:
                got = 0
                await trio.sleep(0.6)  # a stalled consumer
                try:
                    while data := await slow.receive_some(16 * 1024):
                        got += len(data)
                    outcome["A"] = f"all {got} bytes arrived"
                except mplex.StreamReset as exc:
                    outcome["A"] = f"reset after {got} bytes ({'peer' if exc.by_peer else 'our policy'})"

            async def echo_once() -> None:
                await trio.sleep(0.1)  # let A fill the connection first
                start = trio.current_time()
                await echo.send_all(b"ping")
                await echo.send_eof()
                data = await quick.receive_some()
                waited = trio.current_time() - start
                outcome["B"] = f"echo of {data!r} {'waited behind A' if waited > 0.1 else 'at once'}"

            nursery.start_soon(send_flood)
            nursery.start_soon(read_slowly)
            nursery.start_soon(echo_once)
    print(f"{policy:17} A: {outcome['A']}; B: {outcome['B']}")


async def main() -> None:
    for policy in ("block", "reset", "block-then-reset"):
        await run(policy)


if __name__ == "__main__":
    trio.run(main)
