"""Query vectors shared by every process through Redis (`REDIS_URL`): a repeated question is embedded once for
the whole deployment, not once per process. Keyed by model and text (a hash), float32 bytes, with a TTL; every
failure (Redis down or slow: 1 s timeouts) counts as a miss, so a search never waits on it or fails for it."""

from __future__ import annotations

import hashlib
import logging

import numpy as np

log = logging.getLogger(__name__)
PREFIX = "rag:qvec:"


class RedisVectors:
    def __init__(self, url: str, *, ttl: int = 7 * 24 * 3600):
        import redis

        self.client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
        self.ttl = ttl
        self._warned = False

    @staticmethod
    def key(model_id: str, text: str) -> str:
        return PREFIX + hashlib.sha256(f"{model_id}\x00{text}".encode("utf-8", "surrogatepass")).hexdigest()

    def get(self, model_id: str, text: str) -> np.ndarray | None:
        try:
            raw = self.client.get(self.key(model_id, text))
        except Exception as exc:  # noqa: BLE001 - a shared cache that fails is a miss
            self._warn(exc)
            return None
        return np.frombuffer(raw, dtype=np.float32).copy() if raw else None

    def put(self, model_id: str, text: str, vector: np.ndarray) -> None:
        try:
            self.client.set(self.key(model_id, text), np.asarray(vector, dtype=np.float32).tobytes(), ex=self.ttl)
        except Exception as exc:  # noqa: BLE001
            self._warn(exc)

    def _warn(self, exc: Exception) -> None:
        if not self._warned:
            self._warned = True
            log.warning("shared query vector cache unavailable (%s); embedding locally", type(exc).__name__)
