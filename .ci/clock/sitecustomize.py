"""Loaded by every Python process of `make test-clock` (PYTHONPATH): the suite, and the servers and workers it starts.

Those runs shift the wall clock with Debian's libfaketime 0.9.10 and leave the monotonic clock alone
(FAKETIME_DONT_FAKE_MONOTONIC=1, else lock and event timeouts never end). That version then breaks
clock_nanosleep() on the monotonic clock, which Python 3.11's time.sleep uses: every sleep fails with EINVAL
(wolfcw/libfaketime#426). Under libfaketime, time.sleep waits in select() instead, which it leaves alone.
"""

import os

if "faketime" in os.environ.get("LD_PRELOAD", ""):
    import select
    import time

    def _sleep(seconds: float) -> None:
        """time.sleep without clock_nanosleep (select retries after a signal with the time left)."""
        select.select([], [], [], seconds)

    _sleep.__doc__ = time.sleep.__doc__
    time.sleep = _sleep
