"""Where streamed answers run (the chat WebSocket, CG_RAG's SSE): a bounded pool of threads of their own, never
the event loop's default executor.

A streamed answer blocks a thread for as long as the model writes (seconds, or a read timeout when it stalls).
On the loop's default executor (a few threads on a small machine) a handful of slow sockets would stall
everything else that hands work to it: MCP's key checks and tool calls, database calls of async views. Here
each answer takes a slot of `THREADS`; with none free the face answers "busy" at once (an error frame, or 429
with Retry-After) instead of queueing, and every answer ends by `DEADLINE` seconds: its `cancelled()` turns true
and the face sends a final error frame.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from django.conf import settings

BUSY_RETRY_AFTER = 5  # seconds a refused caller is asked to wait


@dataclass
class AnswerStreams:
    threads: int
    deadline: float  # seconds an answer may stream in all
    clock: Callable[[], float] = time.monotonic
    _executor: ThreadPoolExecutor = field(init=False, repr=False)
    _slots: threading.BoundedSemaphore = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix="rag-answer")
        self._slots = threading.BoundedSemaphore(self.threads)

    def submit(self, produce: Callable[[], None]) -> Future | None:
        """Run `produce` on an answer thread; None (nothing started) when every slot is taken."""
        slot = self.reserve()
        return slot.submit(produce) if slot is not None else None

    def reserve(self) -> "Slot | None":
        """Take a slot now, to start the answer later (an HTTP stream answers 429 before it has begun); None when
        every slot is taken. A slot is freed when its answer ends, or by `release()` if it never starts."""
        if not self._slots.acquire(blocking=False):
            return None
        return Slot(self)

    def ends_at(self) -> float:
        """The deadline of an answer starting now, on `clock`."""
        return self.clock() + self.deadline

    def in_use(self) -> int:
        return self.threads - self._slots._value  # noqa: SLF001 - the semaphore's own count, read for the ops pages


class Slot:
    """One answer thread, taken: `submit` runs the answer on it, `release` gives it back unused."""

    def __init__(self, streams: AnswerStreams):
        self.streams = streams
        self._held = True

    def submit(self, produce: Callable[[], None]) -> Future:
        if not self._held:
            raise RuntimeError("this slot was released")
        self._held = False
        try:
            future = self.streams._executor.submit(produce)  # noqa: SLF001 - the pool's own slot
        except BaseException:
            self.streams._slots.release()  # noqa: SLF001
            raise
        future.add_done_callback(lambda _: self.streams._slots.release())  # noqa: SLF001
        return future

    def release(self) -> None:
        if self._held:
            self._held = False
            self.streams._slots.release()  # noqa: SLF001


DEADLINE_PASSED = object()  # what `relay` yields last when the answer ran out of time
_DONE = object()


async def relay(slot: Slot, items: Callable[[Callable[[], bool]], Iterator], *, cancel: threading.Event,
                on_error: Callable[[BaseException], object]) -> AsyncIterator:
    """Run `items(cancelled)` on the slot's answer thread and yield what it yields, on the event loop, as it comes.

    `cancelled()` turns true when `cancel` is set (the reader left) or the answer's deadline passes; then
    DEADLINE_PASSED is the last item. A failure of `items` ends the stream with `on_error(exc)`. The thread's
    database connections are closed when it ends; the relay ends once the thread has."""
    from django.db import close_old_connections, connections

    streams, loop, queue = slot.streams, asyncio.get_running_loop(), asyncio.Queue()
    ends_at = streams.ends_at()

    def cancelled() -> bool:
        return cancel.is_set() or streams.clock() >= ends_at

    def put(item) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, item)

    def run() -> None:
        close_old_connections()
        try:
            for item in items(cancelled):
                put(item)
                if cancelled():
                    break
        except BaseException as exc:  # noqa: BLE001 - the face shapes the failure; the thread survives
            put(on_error(exc))
        finally:
            connections.close_all()  # this thread's own connections: none left open idle
            put(_DONE)

    worker = asyncio.wrap_future(slot.submit(run))
    while True:
        try:
            item = await asyncio.wait_for(queue.get(), timeout=max(0.0, ends_at - streams.clock()))
        except TimeoutError:
            cancel.set()  # the producer stops at its next check; its thread frees its slot then
            yield DEADLINE_PASSED
            return
        if item is _DONE:
            break
        yield item
    await worker


_streams: AnswerStreams | None = None
_lock = threading.Lock()


def answer_streams() -> AnswerStreams:
    """This process's answer threads, sized by settings.RAG_ANSWER_STREAMS."""
    global _streams
    if _streams is None:
        with _lock:
            if _streams is None:
                config = settings.RAG_ANSWER_STREAMS
                _streams = AnswerStreams(threads=config["THREADS"], deadline=config["DEADLINE"])
    return _streams


def reset_answer_streams() -> None:
    """Forget the pool (tests change its settings); answers running on the old one finish there."""
    global _streams
    with _lock:
        _streams = None
