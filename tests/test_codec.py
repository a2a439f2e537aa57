"""The frame codec: spec vectors, chunking, limits, coalescing, round trips."""

from __future__ import annotations

import random
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mplex
from mplex import Decoder, Encoder, Flag, Frame, ProtocolError
from tests.helpers import frame, load_vectors

VECTORS = load_vectors()


def expected_frames(case: dict[str, Any]) -> list[Frame]:
    return [Frame(i, Flag(f), bytes.fromhex(h)) for i, f, h in case["frames"]]


def decoder_for(case: dict[str, Any]) -> Decoder:
    return Decoder(case.get("max_message_size", mplex.MAX_MESSAGE_SIZE))


def feed_whole(case: dict[str, Any]) -> tuple[list[Frame], Decoder]:
    decoder = decoder_for(case)
    return decoder.feed(bytes.fromhex(case["hex"].replace(" ", ""))), decoder


def feed_bytewise(case: dict[str, Any]) -> tuple[list[Frame], Decoder]:
    decoder = decoder_for(case)
    frames: list[Frame] = []
    for byte in bytes.fromhex(case["hex"].replace(" ", "")):
        frames += decoder.feed(bytes([byte]))
    return frames, decoder


def feed_with_trailing(case: dict[str, Any]) -> tuple[list[Frame], Decoder]:
    """The vector followed by the first bytes of another frame, which must stay held."""
    decoder = decoder_for(case)
    frames = decoder.feed(bytes.fromhex(case["hex"].replace(" ", "")) + b"\x02\x05ab")
    return frames, decoder


FEEDERS = [feed_whole, feed_bytewise, feed_with_trailing]


class TestSpecVectors:
    @pytest.mark.parametrize(
        ("case", "feeder"),
        [
            pytest.param(c, f, id=f"{c['name']}-{f.__name__}")
            for c in VECTORS
            if "error" not in c
            for f in FEEDERS
            # Trailing bytes after a truncated frame would become its body.
            if not (f is feed_with_trailing and "remaining" in c)
        ],
    )
    def test_valid_vectors_decode_to_the_expected_frames(self, case: dict[str, Any], feeder: Any) -> None:
        frames, decoder = feeder(case)
        assert frames == expected_frames(case)
        extra = 2 if feeder is feed_with_trailing else 0  # the trailing prefix is consumed
        assert decoder.buffered == case.get("remaining", 0) + extra

    @pytest.mark.parametrize("feeder", FEEDERS, ids=lambda f: f.__name__)
    @pytest.mark.parametrize("case", [c for c in VECTORS if "error" in c], ids=lambda c: c["name"])
    def test_invalid_vectors_raise_the_expected_error(self, case: dict[str, Any], feeder: Any) -> None:
        error = getattr(mplex, case["error"])
        with pytest.raises(error):
            feeder(case)

    @pytest.mark.parametrize(
        "case", [c for c in VECTORS if "error" not in c and c["frames"]], ids=lambda c: c["name"]
    )
    def test_our_encoder_produces_the_vector_bytes(self, case: dict[str, Any]) -> None:
        encoded = b"".join(Encoder().frame(f.stream_id, f.flag, f.data) for f in expected_frames(case))
        assert encoded == bytes.fromhex(case["hex"].replace(" ", ""))


class TestLimits:
    def test_oversized_length_is_rejected_before_the_body_arrives(self) -> None:
        decoder = Decoder(max_message_size=1000)
        with pytest.raises(mplex.FrameTooLargeError) as info:
            decoder.feed(b"\x02\xe9\x07")  # declares 1001 bytes, sends none of them
        assert info.value.length == 1001
        assert info.value.limit == 1000
        assert info.value.offset == 0

    def test_a_frame_exactly_at_the_limit_is_accepted(self) -> None:
        decoder = Decoder(max_message_size=1 << 20)
        body = bytes(range(256)) * 4096
        assert decoder.feed(frame(3, Flag.MESSAGE_RECEIVER, body)) == [Frame(3, Flag.MESSAGE_RECEIVER, body)]

    @pytest.mark.parametrize(
        ("prefix", "at"),
        [
            (b"\x8a\x00\x01", 0),  # a two-byte header whose last byte adds nothing
            (b"\x8a\x80\x00\x01", 0),  # the same in three bytes
            (b"\x8a\x01\x80\x00", 2),  # a two-byte length of zero
            (b"\x0a\x85\x00", 1),  # a two-byte length of five
        ],
        ids=["header-2", "header-3", "length-zero", "length-five"],
    )
    def test_a_non_minimal_header_or_length_is_refused_mid_chunk(self, prefix: bytes, at: int) -> None:
        # After a valid frame and with bytes to spare, so no prefix is cut short; the
        # offset is the bad varint's.
        good = frame(300, Flag.MESSAGE_INITIATOR, b"ok")
        with pytest.raises(mplex.InvalidVarintError) as info:
            Decoder().feed(good + prefix + b"\x00" * 16)
        assert info.value.offset == len(good) + at

    def test_error_offset_points_at_the_bad_frame(self) -> None:
        decoder = Decoder()
        decoder.feed(frame(0, Flag.NEW_STREAM, b"abc"))
        with pytest.raises(mplex.UnknownFlagError) as info:
            decoder.feed(b"\x02\x01x\x0f\x00")
        assert info.value.offset == 5 + 3

    def test_frames_before_an_error_in_the_same_chunk_are_kept(self) -> None:
        decoder = Decoder()
        with pytest.raises(ProtocolError) as info:
            decoder.feed(frame(1, Flag.MESSAGE_INITIATOR, b"ok") + b"\x07\x00")
        assert info.value.decoded == [Frame(1, Flag.MESSAGE_INITIATOR, b"ok")]

    # The largest example (six 70,000-byte frames fed a byte at a time) takes about
    # 0.25 s: over hypothesis's default 200 ms deadline on a busy machine, which is not
    # a wrong decode.  No per-example deadline.
    @given(st.lists(st.integers(1, 70000), min_size=1, max_size=6), st.integers(1, 9000))
    @settings(max_examples=40, deadline=None)
    def test_held_input_never_exceeds_one_frame_plus_one_prefix(self, sizes: list[int], chunk: int) -> None:
        wire = b"".join(frame(7, Flag.MESSAGE_INITIATOR, b"z" * n) for n in sizes)
        decoder = Decoder()
        limit = max(sizes) + 18
        for start in range(0, len(wire), chunk):
            decoder.feed(wire[start : start + chunk])
            assert decoder.buffered <= limit
        assert decoder.buffered == 0

    def test_a_body_in_tiny_chunks_costs_its_bytes_not_an_object_per_chunk(self) -> None:
        body = bytes(range(256)) * 256  # 64 KiB, fed one byte at a time
        wire = frame(3, Flag.MESSAGE_INITIATOR, body)
        decoder = Decoder()
        tracemalloc.start()
        try:
            for i in range(len(wire) - 1):
                decoder.feed(wire[i : i + 1])
            held, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert held < 2 * len(body)  # an object per chunk would hold over 30x the body
        assert decoder.feed(wire[-1:]) == [Frame(3, Flag.MESSAGE_INITIATOR, body)]

    @given(st.integers(1, 70_000), st.lists(st.integers(1, 40_000), min_size=1, max_size=8))
    @settings(max_examples=200)
    def test_a_body_in_chunks_of_any_sizes_comes_out_whole(self, size: int, chunks: list[int]) -> None:
        body = random.Random(size).randbytes(size)
        wire = frame(1, Flag.MESSAGE_RECEIVER, body) + frame(1, Flag.CLOSE_RECEIVER, b"")
        decoder, got, pos, turn = Decoder(), [], 0, 0
        while pos < len(wire):
            step = chunks[turn % len(chunks)]
            got += decoder.feed(wire[pos : pos + step])
            pos, turn = pos + step, turn + 1
        assert got == [Frame(1, Flag.MESSAGE_RECEIVER, body), Frame(1, Flag.CLOSE_RECEIVER, b"")]
        assert decoder.buffered == 0


class TestCoalescing:
    def test_adjacent_messages_of_one_stream_merge(self) -> None:
        wire = b"".join(frame(1, Flag.MESSAGE_INITIATOR, bytes([i]) * 3) for i in range(4))
        frames = Decoder(coalesce=True).feed(wire)
        assert frames == [Frame(1, Flag.MESSAGE_INITIATOR, b"\0\0\0\1\1\1\2\2\2\3\3\3")]

    def test_merging_stops_at_another_stream_or_flag(self) -> None:
        wire = (
            frame(1, Flag.MESSAGE_INITIATOR, b"a")
            + frame(1, Flag.MESSAGE_RECEIVER, b"b")  # same number, the other side's stream
            + frame(1, Flag.MESSAGE_RECEIVER, b"c")
            + frame(1, Flag.CLOSE_RECEIVER)
            + frame(1, Flag.MESSAGE_INITIATOR, b"d")
        )
        frames = Decoder(coalesce=True).feed(wire)
        assert [(f.flag, f.data) for f in frames] == [
            (Flag.MESSAGE_INITIATOR, b"a"),
            (Flag.MESSAGE_RECEIVER, b"bc"),
            (Flag.CLOSE_RECEIVER, b""),
            (Flag.MESSAGE_INITIATOR, b"d"),
        ]

    def test_counts_frames_before_merging(self) -> None:
        decoder = Decoder(coalesce=True)
        decoder.feed(frame(0, Flag.MESSAGE_INITIATOR, b"x") * 10)
        assert decoder.frames_decoded == 10


class TestEncoder:
    def test_each_frame_is_one_contiguous_bytes(self) -> None:
        out = Encoder().frame(2, Flag.MESSAGE_INITIATOR, bytearray(b"hello"))
        assert type(out) is bytes
        assert out == b"\x12\x05hello"

    def test_long_data_is_split_into_frames_of_at_most_frame_size(self) -> None:
        data = bytes(range(256)) * 10
        frames = list(Encoder(frame_size=1000).frames(4, Flag.MESSAGE_RECEIVER, data))
        decoded = Decoder().feed(b"".join(frames))
        assert [len(f.data) for f in decoded] == [1000, 1000, 560]
        assert b"".join(f.data for f in decoded) == data

    def test_frame_size_cannot_exceed_one_mebibyte(self) -> None:
        with pytest.raises(ValueError):
            Encoder(frame_size=(1 << 20) + 1)

    def test_one_frame_refuses_oversized_data_and_bad_ids(self) -> None:
        with pytest.raises(ValueError):
            Encoder(frame_size=4).frame(0, Flag.MESSAGE_INITIATOR, b"12345")
        with pytest.raises(ValueError):
            Encoder().frame(2**60, Flag.NEW_STREAM)


frame_strategy = st.tuples(
    # ids of every header length; below 262,144 the decoder reads the header inline
    st.integers(0, 2**60 - 1) | st.integers(0, 40) | st.integers(0, 300_000),
    st.sampled_from(list(Flag)),
    st.binary(max_size=300),
)


class TestAbsorb:
    """``Decoder.absorb``: the cheap path for the middle of a large frame's body."""

    def test_takes_only_chunks_that_continue_a_body_without_completing_it(self) -> None:
        body = bytes(range(256)) * 40
        first = frame(3, Flag.MESSAGE_RECEIVER, body)
        wire = first + frame(3, Flag.CLOSE_RECEIVER)
        prefix = len(first) - len(body)
        decoder = Decoder()
        assert not decoder.absorb(wire[:100])  # no body in progress: nothing kept
        assert decoder.buffered == 0
        assert decoder.feed(wire[:100]) == []  # the prefix and the body's start
        assert not decoder.absorb(b"")
        assert not decoder.absorb(bytearray(wire[100:200]))  # feed_raw copies those first
        assert decoder.absorb(wire[100:5000])
        assert decoder.buffered == 5000 - prefix
        assert decoder.offset == 5000
        assert not decoder.absorb(wire[5000 : len(first)])  # it would complete the frame
        assert not decoder.absorb(wire[5000:])
        assert decoder.feed(wire[5000:]) == [
            Frame(3, Flag.MESSAGE_RECEIVER, body),
            Frame(3, Flag.CLOSE_RECEIVER, b""),
        ]
        assert decoder.buffered == 0

    @given(st.lists(frame_strategy, max_size=20), st.data())
    @settings(max_examples=100)
    def test_absorbing_where_it_can_decodes_exactly_what_feeding_does(
        self, frames: list[tuple[int, Flag, bytes]], data: st.DataObject
    ) -> None:
        encoded = [Encoder().frame(i, f, b) for i, f, b in frames]
        wire = b"".join(encoded)
        ends = [sum(map(len, encoded[: n + 1])) for n in range(len(encoded))]
        # Random cuts, and cuts at frame ends: a chunk that just completes a body.
        cuts = data.draw(st.lists(st.integers(0, len(wire)), max_size=30))
        at_ends = st.lists(st.sampled_from(ends), max_size=5) if ends else st.just([])
        cuts = sorted({*cuts, *data.draw(at_ends)})
        decoder, reference = Decoder(coalesce=True), Decoder(coalesce=True)
        out: list[Frame] = []
        expected: list[Frame] = []
        start = 0
        for cut in [*cuts, len(wire)]:
            chunk = wire[start:cut]
            expected += reference.feed(chunk)
            if not decoder.absorb(chunk):
                out += decoder.feed(chunk)
            start = cut
        assert out == expected
        assert decoder.buffered == 0
        assert decoder.offset == len(wire)


class TestPassOn:
    """``Decoder.body_header`` and ``pass_on``: the middle of a body handed on as it came."""

    @given(st.lists(frame_strategy, max_size=20), st.data())
    @settings(max_examples=100)
    def test_passing_on_where_it_can_delivers_exactly_what_feeding_does(
        self, frames: list[tuple[int, Flag, bytes]], data: st.DataObject
    ) -> None:
        """Each stream's Message bytes, in order, and the frame count are the same."""
        wire = b"".join(Encoder().frame(i, f, b) for i, f, b in frames)
        cuts = sorted(set(data.draw(st.lists(st.integers(0, len(wire)), max_size=30))))
        decoder, reference = Decoder(), Decoder()
        got: dict[int, bytes] = {}
        expected: dict[int, bytes] = {}

        def take(into: dict[int, bytes], header: int, body: bytes) -> None:
            if 0 < header & 7 <= 2:
                into[header] = into.get(header, b"") + body

        start = 0
        for cut in [*cuts, len(wire)]:
            chunk = wire[start:cut]
            start = cut
            for f in reference.feed(chunk):
                take(expected, f.header, f.data)
            header = decoder.body_header(chunk)
            if header >= 0:
                kept = decoder.pass_on(chunk)
                take(got, header, (kept or b"") + chunk)
            else:
                for f in decoder.feed(chunk):
                    take(got, f.header, f.data)
        assert got == expected
        assert decoder.frames_decoded == reference.frames_decoded == len(frames)
        assert decoder.buffered == 0
        assert decoder.offset == len(wire)


class TestFramesPerFeed:
    """``frames_per_feed`` bounds the frames one call decodes; the rest waits, unparsed,
    for ``resume_raw``, and nothing is lost or reordered."""

    def test_a_chunk_is_decoded_in_steps_of_at_most_the_bound(self) -> None:
        wire = b"".join(frame(i, Flag.CLOSE_INITIATOR) for i in range(10)) + frame(3, Flag.NEW_STREAM)[:1]
        decoder = Decoder(frames_per_feed=3)
        steps = [decoder.feed_raw(wire)]
        while decoder.pending:
            with pytest.raises(RuntimeError, match="resume_raw"):
                decoder.feed_raw(b"")
            steps.append(decoder.resume_raw())
        assert [len(step) for step in steps] == [3, 3, 3, 1]
        assert [h >> 3 for step in steps for h, _ in step] == list(range(10))
        assert decoder.buffered == 1  # the cut prefix, kept for the next chunk
        assert decoder.feed_raw(frame(3, Flag.NEW_STREAM)[1:]) == [(3 << 3, b"")]

    @given(st.lists(st.binary(max_size=40), max_size=60), st.integers(1, 8), st.integers(1, 64))
    @settings(max_examples=200, deadline=None)
    def test_bounded_steps_decode_what_one_feed_does(self, bodies: list[bytes], bound: int, cut: int) -> None:
        wire = b"".join(
            frame(i % 5, Flag.MESSAGE_INITIATOR if i % 3 else Flag.CLOSE_RECEIVER, b)
            for i, b in enumerate(bodies)
        )
        whole = Decoder(coalesce=True).feed_raw(wire)
        stepped = Decoder(coalesce=True, frames_per_feed=bound)
        got = []
        for start in range(0, len(wire), cut):
            got += stepped.feed_raw(wire[start : start + cut])
            while stepped.pending:
                got += stepped.resume_raw()
        merged: list[tuple[int, bytes]] = []  # chunk and step boundaries split merged runs
        for header, body in got:
            if merged and merged[-1][0] == header and header & 7 in (1, 2):
                merged[-1] = (header, merged[-1][1] + body)
            else:
                merged.append((header, body))
        assert merged == whole


class TestRoundTrips:
    @given(st.lists(frame_strategy, max_size=30), st.data())
    @settings(max_examples=200)
    def test_random_frames_survive_random_chunking(
        self, frames: list[tuple[int, Flag, bytes]], data: st.DataObject
    ) -> None:
        wire = b"".join(Encoder().frame(i, f, b) for i, f, b in frames)
        cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=10)))
        decoder = Decoder()
        out: list[Frame] = []
        start = 0
        for cut in [*cuts, len(wire)]:
            out += decoder.feed(wire[start:cut])
            start = cut
        assert out == [Frame(i, f, b) for i, f, b in frames]
        assert decoder.buffered == 0

    @given(st.lists(frame_strategy, max_size=30), st.integers(1, 64))
    @settings(max_examples=100)
    def test_coalesced_output_is_the_exact_output_merged(
        self, frames: list[tuple[int, Flag, bytes]], chunk: int
    ) -> None:
        wire = b"".join(Encoder().frame(i, f, b) for i, f, b in frames)
        exact, merged = Decoder(), Decoder(coalesce=True)
        a: list[Frame] = []
        b: list[Frame] = []
        for start in range(0, len(wire), chunk):
            a += exact.feed(wire[start : start + chunk])
            b += merged.feed(wire[start : start + chunk])
        regrouped = merge_adjacent_messages(a)
        assert b"".join(f.data for f in b) == b"".join(f.data for f in a)
        assert [(f.stream_id, f.flag) for f in b if f.flag not in (1, 2)] == [
            (f.stream_id, f.flag) for f in regrouped if f.flag not in (1, 2)
        ]

    @given(
        st.lists(
            st.tuples(
                st.sampled_from(
                    [
                        (1, Flag.MESSAGE_INITIATOR),
                        (1, Flag.MESSAGE_RECEIVER),
                        (300, Flag.MESSAGE_INITIATOR),
                        (2, Flag.CLOSE_INITIATOR),
                        (5, Flag.NEW_STREAM),
                    ]
                ),
                st.sampled_from([0, 1, 3, 32, 127, 128, 1000, 5000]),
                st.integers(1, 40),
            ),
            max_size=12,
        ),
        st.integers(7, 4096),  # a run needs two frames in one chunk; prefixes still split
        st.randoms(use_true_random=False),
    )
    # Up to a few MB per example fed in small chunks: no per-example deadline, which
    # would make the test fail on a busy machine rather than on a wrong decode.
    @settings(max_examples=300, deadline=None)
    def test_runs_of_equal_frames_merge_into_the_exact_bytes_of_each_stream(
        self, shapes: list[tuple[tuple[int, Flag], int, int]], chunk: int, rng: random.Random
    ) -> None:
        """Runs of same-stream, same-length frames (the many-small-writes case) take the
        decoder's run path; what comes out must be what frame-by-frame decoding gives,
        merged, with every byte on its own stream, whatever the chunking."""
        frames = [
            Frame(i, f, rng.randbytes(0 if f not in (1, 2) else length))
            for (i, f), length, repeat in shapes
            for _ in range(repeat)
        ]
        wire = b"".join(Encoder().frame(*f) for f in frames)
        merged_decoder = Decoder(coalesce=True)
        merged: list[Frame] = []
        for start in range(0, len(wire), chunk):
            merged += merged_decoder.feed(wire[start : start + chunk])
        assert merge_adjacent_messages(merged) == merge_adjacent_messages(frames)
        assert merged_decoder.frames_decoded == len(frames)
        assert merged_decoder.buffered == 0

    @given(st.binary(max_size=200), st.integers(1, 50))
    @settings(max_examples=300)
    def test_arbitrary_bytes_only_ever_produce_frames_or_protocol_errors(
        self, wire: bytes, chunk: int
    ) -> None:
        decoder = Decoder(max_message_size=100)
        try:
            for start in range(0, len(wire), chunk):
                decoder.feed(wire[start : start + chunk])
        except ProtocolError:
            pass
        assert decoder.buffered <= 100 + 18


def merge_adjacent_messages(frames: list[Frame]) -> list[Frame]:
    """Merge neighbouring Message frames of one stream: the form coalescing may produce."""
    out: list[Frame] = []
    for f in frames:
        if out and f.flag in (1, 2) and out[-1].flag == f.flag and out[-1].stream_id == f.stream_id:
            out[-1] = Frame(f.stream_id, f.flag, out[-1].data + f.data)
        else:
            out.append(f)
    return out
