"""How the trio layer learns that the program has gone idle: every other task is blocked.

The writer gathers a busy program's frames until the program idles, so that a sender
of many messages fills large transport writes; the reader, after lending its read turn
over the generic path, waits for the same moment before it reads again.  trio's idle
detection is public API but lives in ``trio.testing`` (``wait_all_tasks_blocked``), the
only place trio offers it; this module is the one place that imports it.  Its cost is
program-wide only while a task waits in it: trio then checks for idleness on each
scheduler pass with no runnable task.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from trio.testing import wait_all_tasks_blocked

__all__ = ["wait_for_idle"]

#: ``await wait_for_idle()`` returns once every other task is blocked.
wait_for_idle: Callable[[], Awaitable[None]] = wait_all_tasks_blocked
