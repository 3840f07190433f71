"""Streaming answers over a WebSocket: the page sends a question, the consumer forwards the service's events."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from assistant.inputs import AskInput
from assistant.services import error_frame, web_chat_stream, web_socket_closed, web_socket_opened
from infra.errors import ServiceError
from infra.limits import Client
from rag.streams import BUSY_RETRY_AFTER, DEADLINE_PASSED, SERVER_STOPPING, answer_streams, relay

# The close code of a socket over a per-client limit (4000-4999 are the application's; 429 as in HTTP). The
# socket is accepted first, so the page reads the error frame (code, retry_after) before the close; a socket
# refused before accept would reach the browser as a bare handshake failure.
LIMIT_CLOSE_CODE = 4429


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")  # NaN and Infinity: Python's json reads them, DRF's parser does not


class ChatConsumer(AsyncJsonWebsocketConsumer):
    """One socket per page; one answer at a time. Closing the socket stops the model's stream."""

    task: asyncio.Task | None = None
    counted = False  # this socket counts against its client's open sockets (infra.limits)

    async def connect(self):
        self.cancel = threading.Event()
        self.answering = False  # true from a question until its final (or error) frame is sent
        self.client = Client.of_scope(self.scope)
        await self.accept()
        try:
            self.counted = await sync_to_async(web_socket_opened)(self.client)
        except ServiceError as exc:
            await self.send_json(error_frame(exc))
            await self.close(code=LIMIT_CLOSE_CODE)

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        """Decode a text frame as JSON; anything else (not JSON, NaN, a binary frame, nesting deeper than the stack)
        is an `invalid_request` frame and the socket stays open, as over HTTP (channels' own decoder raises, which
        closes the socket with 1011)."""
        try:
            if text_data is None:
                raise ValueError("a binary frame")
            content = json.loads(text_data, parse_constant=_refuse_constant)
        except (ValueError, RecursionError):
            await self.send_json({"type": "error", "code": "invalid_request",
                                  "message": "The message is not a JSON object.",
                                  "fields": {"non_field_errors": ["Send one JSON object per text frame."]}})
            return
        await self.receive_json(content, **kwargs)

    async def receive_json(self, content, **kwargs):
        data = AskInput(data=content if isinstance(content, dict) else {})
        if not data.is_valid():
            await self.send_json({"type": "error", "code": "invalid_request", "message": "The request is not valid.",
                                  "fields": data.errors})
            return
        if self.answering:
            await self.send_json({"type": "error", "code": "busy", "message": "An answer is still streaming."})
            return
        self.answering = True
        self.cancel = threading.Event()
        self.task = asyncio.create_task(self._stream(data.validated_data, self.cancel))

    async def _stream(self, ask: dict, cancel: threading.Event):
        """Run the answer on an answer thread (rag.streams) and forward its events; "busy" when none is free, a
        final error frame when the answer runs past its deadline or the server stops (rag.streams: SIGTERM)."""
        slot = answer_streams().reserve()
        if slot is None:
            self.answering = False
            await self.send_json({"type": "error", "code": "busy", "retry_after": BUSY_RETRY_AFTER,
                                  "message": "Too many answers are being written right now; ask again in a moment."})
            return
        events = relay(slot, lambda cancelled: web_chat_stream(**ask, client=self.client, cancelled=cancelled),
                       cancel=cancel, on_error=lambda exc: {"type": "error", "code": "service_error",
                                                            "message": "The answer failed."})
        try:
            async with contextlib.aclosing(events):
                async for event in events:
                    if event is DEADLINE_PASSED:
                        await self.send_json({"type": "error", "code": "answer_deadline",
                                              "message": "The answer took too long and was stopped."})
                        return
                    if event is SERVER_STOPPING:
                        if self.answering:  # not when the stop came just after the answer's last frame
                            with contextlib.suppress(Exception):  # the socket may be gone already
                                await self.send_json({"type": "error", "code": "server_stopping",
                                                      "retry_after": BUSY_RETRY_AFTER,
                                                      "message": "The server is restarting; ask again in a moment."})
                        return
                    if event["type"] in ("final", "error"):
                        self.answering = False  # the page may ask its next question once it has this frame
                    if not cancel.is_set():
                        await self.send_json(event)
        finally:
            self.answering = False

    async def disconnect(self, code):
        self.cancel.set()
        task = getattr(self, "task", None)
        if task is not None and not task.done():
            # The page left mid-answer: closing the relay hangs up on the model call now, even one stalled in a
            # read (rag.streams.relay), instead of holding the answer thread until the model's read timeout.
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.counted:
            self.counted = False
            await sync_to_async(web_socket_closed)(self.client)
