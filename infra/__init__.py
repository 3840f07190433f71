"""The platform under every app: errors with stable codes, request parsing, client identity, rate and capacity
limits, live counters, the task queue's health, the Redis cache, access control and middleware. It imports nothing
from `rag` or the apps above it (rag/tests/test_layers.py)."""
