"""Thread-safe counters of the judge server: requests, items, batches, latency."""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque
from typing import Any, Iterable


def summary(values: Iterable[float]) -> dict[str, float | int]:
    """Count, mean, median, 95th/99th percentile and max of some numbers (nearest-rank percentiles).

    Example:
        >>> summary([1.0, 2.0, 3.0, 4.0])["p50"]
        2.0
    """
    data = sorted(values)
    if not data:
        return {"count": 0}

    def rank(q: float) -> float:
        return data[max(0, math.ceil(q * len(data)) - 1)]

    return {
        "count": len(data),
        "mean": sum(data) / len(data),
        "p50": rank(0.50),
        "p95": rank(0.95),
        "p99": rank(0.99),
        "max": data[-1],
    }


class ServerMetrics:
    """What ``GET /metrics`` reports. Safe to update from the event loop and the batch worker.

    Latencies and batch sizes are kept for the most recent ``window`` requests / batches.

    Example:
        >>> m = ServerMetrics()
        >>> m.record_request("/score", 200, 0.01)
        >>> m.record_items(3)
        >>> m.snapshot()["items"]
        3
    """

    def __init__(self, window: int = 10_000) -> None:
        self._lock = threading.Lock()
        self.started = time.time()
        self.requests_by_path: Counter[str] = Counter()
        self.requests_by_status: Counter[str] = Counter()
        self.server_errors = 0
        self.items = 0
        self.batches = 0
        self.batch_items_total = 0
        self.batch_items_max = 0
        self.batch_requests_total = 0
        self._latency: deque[float] = deque(maxlen=window)
        self._batch_items: deque[int] = deque(maxlen=window)
        self._batch_requests: deque[int] = deque(maxlen=window)

    def record_request(self, path: str, status: int, seconds: float) -> None:
        """Count one finished HTTP request (5xx also as a server error); latency is kept for the
        scoring endpoints only."""
        with self._lock:
            self.requests_by_path[path] += 1
            self.requests_by_status[str(status)] += 1
            self.server_errors += status >= 500
            if path in ("/score", "/get_reward"):
                self._latency.append(seconds * 1000.0)

    def record_items(self, items: int) -> None:
        """Count items answered successfully by a scoring endpoint."""
        with self._lock:
            self.items += items

    def record_batch(self, items: int, requests: int) -> None:
        """Count one call of ``Judge.score`` made by the batcher (``requests`` coalesced into it)."""
        with self._lock:
            self.batches += 1
            self.batch_items_total += items
            self.batch_items_max = max(self.batch_items_max, items)
            self.batch_requests_total += requests
            self._batch_items.append(items)
            self._batch_requests.append(requests)

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready copy of the counters."""
        with self._lock:
            return {
                "uptime_s": time.time() - self.started,
                "requests": {
                    "total": sum(self.requests_by_path.values()),
                    "by_path": dict(self.requests_by_path),
                    "by_status": dict(self.requests_by_status),
                    "server_errors": self.server_errors,  # 5xx answers, each logged with its reason
                },
                "items": self.items,
                "batches": self.batches,
                "batch_items": {
                    "mean": self.batch_items_total / self.batches if self.batches else 0.0,
                    "max": self.batch_items_max,
                    "recent": summary(self._batch_items),
                },
                "batch_requests": {
                    "total": self.batch_requests_total,
                    "mean": self.batch_requests_total / self.batches if self.batches else 0.0,
                    "recent": summary(self._batch_requests),
                },
                "latency_ms": summary(self._latency),
            }
