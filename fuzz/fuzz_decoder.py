"""Coverage-guided fuzzing of the frame decoder with atheris (libFuzzer).

    python fuzz/fuzz_decoder.py                       # run until stopped
    python fuzz/fuzz_decoder.py -max_total_time=600   # ten minutes
    python fuzz/fuzz_decoder.py -runs=20000           # what `make test` runs

The properties: whatever the bytes and however they are chunked, the decoder returns
frames or raises ProtocolError, never anything else, and never holds more than one
frame body plus an 18-byte prefix; and the coalescing decoder (with its fast path for
runs of equal frames) gives the exact decoder's frames, neighbours merged.
"""

import sys

import atheris

with atheris.instrument_imports():
    from mplex import Decoder, Frame, ProtocolError

LIMIT = 1000


def one_input(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    chunk = provider.ConsumeIntInRange(1, 4096)
    wire = provider.ConsumeBytes(provider.remaining_bytes())
    exact = decode(wire, chunk, coalesce=False)
    merged = decode(wire, chunk, coalesce=True)
    # Coalescing (and its fast path for runs of equal frames) may only merge neighbours.
    if (exact is None) != (merged is None):
        raise AssertionError("one decoder raised ProtocolError and the other did not")
    if exact is not None and merged is not None and merge(exact) != merge(merged):
        raise AssertionError("the coalescing decoder changed the frames")


def decode(wire: bytes, chunk: int, *, coalesce: bool) -> list[Frame] | None:
    """The frames ``wire`` holds, fed ``chunk`` bytes at a time; None on ProtocolError."""
    decoder = Decoder(max_message_size=LIMIT, coalesce=coalesce)
    frames: list[Frame] = []
    try:
        for start in range(0, len(wire), chunk):
            frames += decoder.feed(wire[start : start + chunk])
            if decoder.buffered > LIMIT + 18:
                raise AssertionError(f"decoder holds {decoder.buffered} bytes")
    except ProtocolError:
        return None
    return frames


def merge(frames: list[Frame]) -> list[Frame]:
    out: list[Frame] = []
    for f in frames:
        if out and f.flag in (1, 2) and out[-1][:2] == f[:2]:
            out[-1] = Frame(f.stream_id, f.flag, out[-1].data + f.data)
        else:
            out.append(f)
    return out


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
