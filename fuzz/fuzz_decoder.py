"""Coverage-guided fuzzing of the frame decoder with atheris (libFuzzer).

    python fuzz/fuzz_decoder.py                       # run until stopped
    python fuzz/fuzz_decoder.py -max_total_time=600   # ten minutes
    python fuzz/fuzz_decoder.py -runs=20000           # what `make test` runs

The property: whatever the bytes and however they are chunked, the decoder returns
frames or raises ProtocolError, never anything else, and never holds more than one
frame body plus an 18-byte prefix.
"""

import sys

import atheris

with atheris.instrument_imports():
    from mplex import Decoder, ProtocolError

LIMIT = 1000


def one_input(data: bytes) -> None:
    provider = atheris.FuzzedDataProvider(data)
    chunk = provider.ConsumeIntInRange(1, 64)
    coalesce = provider.ConsumeBool()
    wire = provider.ConsumeBytes(provider.remaining_bytes())
    decoder = Decoder(max_message_size=LIMIT, coalesce=coalesce)
    try:
        for start in range(0, len(wire), chunk):
            decoder.feed(wire[start : start + chunk])
            if decoder.buffered > LIMIT + 18:
                raise AssertionError(f"decoder holds {decoder.buffered} bytes")
    except ProtocolError:
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
