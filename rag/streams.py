"""Where streamed answers run (the chat WebSocket, CG_RAG's SSE): a bounded pool of threads of their own, never
the event loop's default executor.

A streamed answer blocks a thread for as long as the model writes (seconds, or a read timeout when it stalls).
On the loop's default executor (a few threads on a small machine) a handful of slow sockets would stall
everything else that hands work to it: MCP's key checks and tool calls, database calls of async views. Here
each answer takes a slot of `THREADS`; with none free the face answers "busy" at once (an error frame, or 429
with Retry-After) instead of queueing, and every answer ends by `DEADLINE` seconds: its `cancelled()` turns true
and the face sends a final error frame.

A stopping server (SIGTERM) ends every answer in flight the same way on every face: `relay` yields
SERVER_STOPPING, the face sends its last frames (an error of code `server_stopping`; CG_RAG's SSE then its
`final`), and the answer's model call is hung up on at once (rag.engine.llm.Hangup), so a model that stalls
cannot hold the process. Under Daphne a Twisted "before shutdown" trigger stops them all; an ASGI application
the server cancels stops its own (`stop_streams_when_cancelled`, around the site's application).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field

from django.conf import settings

from rag.engine.llm import Hangup, HungUp

BUSY_RETRY_AFTER = 5  # seconds a refused caller is asked to wait
SHUTDOWN_WAIT = 5.0  # seconds a stopping server gives its answers to send their last frames and record themselves


@dataclass
class AnswerStreams:
    threads: int
    deadline: float  # seconds an answer may stream in all
    clock: Callable[[], float] = time.monotonic
    stopping: bool = field(default=False, init=False)  # the server is stopping: no answer starts any more
    _executor: ThreadPoolExecutor = field(init=False, repr=False)
    _slots: threading.BoundedSemaphore = field(init=False, repr=False)
    _answers: set = field(init=False, repr=False)  # the StreamedAnswers in flight
    _lock: threading.Lock = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix="rag-answer")
        self._slots = threading.BoundedSemaphore(self.threads)
        self._answers = set()
        self._lock = threading.Lock()

    def stop(self) -> list[StreamedAnswer]:
        """The server is stopping: end every answer in flight with SERVER_STOPPING, hang up on their model calls and
        start no new answer. Return the answers, for `stopped()` to wait on. Safe from any thread."""
        with self._lock:
            self.stopping = True
            answers = list(self._answers)
        for answer in answers:
            answer.stop()
        return answers

    def _admit(self, answer: StreamedAnswer) -> bool:
        with self._lock:
            if self.stopping:
                return False
            self._answers.add(answer)
            return True

    def _forget(self, answer: StreamedAnswer) -> None:
        with self._lock:
            self._answers.discard(answer)

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
SERVER_STOPPING = object()  # what `relay` yields last when the server is stopping
_DONE = object()
_WAKE = object()  # put by StreamedAnswer.stop: the relay looks at its answer now


class StreamedAnswer:
    """One answer `relay` is streaming: stopped from any thread, awaited on the event loop until it has ended."""

    def __init__(self, cancel: threading.Event, wake: Callable[[], None]):
        self.cancel = cancel
        self.hangup = Hangup()
        self.stopping = False
        self.worker: asyncio.Future | None = None  # the answer thread's run
        self.ended = asyncio.Event()  # the face has sent its last frame and closed the relay
        self._wake = wake

    def stop(self) -> None:
        """End the answer with SERVER_STOPPING and hang up on its model call (the server is stopping)."""
        if self.stopping:
            return
        self.stopping = True
        self.hang_up()
        with contextlib.suppress(RuntimeError):  # the event loop has closed: nobody is left to tell
            self._wake()

    def hang_up(self) -> None:
        """Cancel the producer and hang up on its model call now, even one blocked reading a stalled model."""
        self.cancel.set()
        self.hangup.now()

    async def finished(self) -> None:
        """Wait until the face has sent its last frame and the answer's thread has ended (its request recorded)."""
        await self.ended.wait()
        if self.worker is not None:
            await asyncio.wait([self.worker])


async def stopped(answers: Iterable[StreamedAnswer], timeout: float = SHUTDOWN_WAIT) -> None:
    """Wait until the stopped `answers` have finished, at most `timeout` seconds."""
    waits = [asyncio.ensure_future(answer.finished()) for answer in answers]
    if waits:
        await asyncio.wait(waits, timeout=timeout)
        for wait in waits:
            wait.cancel()


# The answers of the ASGI application running in this context (stop_streams_when_cancelled); None outside one.
_application_answers: ContextVar[set | None] = ContextVar("rag_application_answers", default=None)


def stop_streams_when_cancelled(application):
    """Wrap an ASGI application so that when the server cancels it (Daphne cancels every application on SIGTERM)
    the answers it started end with SERVER_STOPPING, and have `SHUTDOWN_WAIT` seconds to finish before the
    cancellation goes on. Another connection's answers are not touched."""

    async def stopping_application(scope, receive, send):
        answers: set = set()
        token = _application_answers.set(answers)  # the tasks the application starts inherit it
        try:
            await application(scope, receive, send)
        except asyncio.CancelledError:
            mine = list(answers)
            for answer in mine:
                answer.stop()
            await stopped(mine)
            raise
        finally:
            _application_answers.reset(token)

    return stopping_application


_stop_registered = False


def _stop_on_shutdown() -> None:
    """Under Daphne, stop every answer in flight before a stopping server closes its sockets (SIGTERM).

    Daphne cancels each application before the reactor shuts down, but a connection that never reached an
    application (a load balancer's TCP probe) makes that step raise for all of them; so the answers also take
    part in Twisted's own "before shutdown" phase, registered once, by the first answer of the process.
    Outside Daphne (tests, other servers) no reactor is running and nothing is registered."""
    global _stop_registered
    reactor = sys.modules.get("twisted.internet.reactor")
    if _stop_registered or reactor is None or not getattr(reactor, "running", False):
        return
    _stop_registered = True

    def stop_answers():
        from twisted.internet import defer

        answers = answer_streams().stop()
        return defer.Deferred.fromFuture(asyncio.ensure_future(stopped(answers))) if answers else None

    reactor.addSystemEventTrigger("before", "shutdown", stop_answers)


async def relay(slot: Slot, items: Callable[[Callable[[], bool]], Iterator], *, cancel: threading.Event,
                on_error: Callable[[BaseException], object]) -> AsyncIterator:
    """Run `items(cancelled)` on the slot's answer thread and yield what it yields, on the event loop, as it comes.

    `cancelled()` turns true when `cancel` is set (the reader left), the answer's deadline passes or the server
    stops; then DEADLINE_PASSED or SERVER_STOPPING is the last item and the model call is hung up on at once, as
    it is when the face closes the relay before the answer has ended (its reader left). Close it with
    `contextlib.aclosing`: that also tells a stopping server the face has sent its last frame. A stop that comes
    as the answer ends can follow the answer's own last item; the face then adds nothing. A failure of `items`
    ends the stream with `on_error(exc)`. The thread's database connections are closed when it ends; the relay
    ends once the thread has."""
    from django.db import close_old_connections, connections

    streams, loop, queue = slot.streams, asyncio.get_running_loop(), asyncio.Queue()
    answer = StreamedAnswer(cancel, lambda: loop.call_soon_threadsafe(queue.put_nowait, _WAKE))
    if not streams._admit(answer):  # noqa: SLF001 - the pool's own registry
        slot.release()
        yield SERVER_STOPPING
        return
    owner = _application_answers.get()
    if owner is not None:
        owner.add(answer)
    _stop_on_shutdown()
    ends_at = streams.ends_at()

    def cancelled() -> bool:
        return cancel.is_set() or streams.clock() >= ends_at

    def put(item) -> None:
        with contextlib.suppress(RuntimeError):  # the event loop has closed (the process is exiting)
            loop.call_soon_threadsafe(queue.put_nowait, item)

    def run() -> None:
        close_old_connections()
        try:
            with answer.hangup.watching():
                for item in items(cancelled):
                    put(item)
                    if cancelled():
                        break
        except HungUp:
            pass  # hung up on by the relay, which has ended the stream itself
        except BaseException as exc:  # noqa: BLE001 - the face shapes the failure; the thread survives
            put(on_error(exc))
        finally:
            connections.close_all()  # this thread's own connections: none left open idle
            put(_DONE)

    worker = None
    try:
        answer.worker = worker = asyncio.wrap_future(slot.submit(run))
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), timeout=max(0.0, ends_at - streams.clock()))
            except TimeoutError:
                answer.hang_up()  # the producer stops now; its thread frees its slot then
                yield DEADLINE_PASSED
                return
            if answer.stopping:
                yield SERVER_STOPPING
                return
            if item is _DONE:
                break
            yield item
        await worker
    finally:
        if worker is not None and not worker.done():
            answer.hang_up()  # the face left before the answer ended: nobody reads the model's words any more
        streams._forget(answer)  # noqa: SLF001
        if owner is not None:
            owner.discard(answer)
        answer.ended.set()


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
