"""Runs of same-shape frames (sans-IO): many small Message frames of one stream with
equal lengths, one after another in one chunk, as a sender of many equal writes
produces them.  The decoder takes such a run whole (``same_shape_run``) instead of a
Python loop iteration per frame.
"""

from __future__ import annotations

__all__ = ["RUN_BODY_LIMIT", "same_shape_run"]

#: Bodies up to this size qualify for a run; above it one slice per frame already
#: costs little next to the copy.
RUN_BODY_LIMIT = 4096
#: Frames checked by the first probe of a run; each further probe doubles, so a run
#: that stops early costs at most twice its own length (no quadratic worst case).
_RUN_FIRST_PROBE = 16


def same_shape_run(data: bytes, pos: int, n: int, prefix: bytes, stride: int) -> tuple[bytes, int] | None:
    """Find the complete frames at ``pos`` that repeat ``prefix`` (same header, same
    length) every ``stride`` bytes; return their bodies joined, and their count.

    Strided slices check one prefix byte of every frame at once, and deleting the
    prefix bytes from a copy with extended-slice ``del`` leaves the bodies joined:
    both run in C, so a run of 32-byte frames costs a few passes over its bytes
    instead of a Python loop iteration per frame.
    """
    available = (n - pos) // stride
    count = 0
    probe = _RUN_FIRST_PROBE
    while count < available:
        probe = min(probe, available - count)
        first = pos + count * stride
        stop = first + probe * stride
        matched = probe
        for j in range(len(prefix)):
            column = data[first + j : stop : stride]
            matched = min(matched, probe - len(column.lstrip(prefix[j : j + 1])))
        count += matched
        if matched < probe:
            break
        probe *= 2
    if not count:
        return None
    frames = bytearray(data[pos : pos + count * stride])
    for j in range(len(prefix)):
        del frames[:: stride - j]  # the next prefix byte of every frame
    return bytes(frames), count
