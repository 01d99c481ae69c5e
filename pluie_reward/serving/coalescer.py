"""verl's concurrent ``compute_score`` calls gathered into batches: :class:`Coalescer`, a small micro-batcher of one
event loop. How a batch is scored is its subclasses': the judge server's ``POST /score``
(:mod:`~pluie_reward.serving.client`) or verl's own reward model (:mod:`~pluie_reward.serving.genrm`). Standard
library only: both import it, neither imports the other's batcher.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, Mapping

from pluie_reward.serving.protocol import OUTPUTS

Item = tuple[dict[str, Any], asyncio.Future]
_running: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[type, Coalescer]]" = weakref.WeakKeyDictionary()


class Coalescer:
    """Items submitted on one event loop under one key within ``max_wait`` seconds of each other go out as one
    batch (:meth:`post`) of at most ``max_items``; each caller's future gets its item's ``logratio``, ``p_yes`` and
    ``verdict``, or the batch's error. A batch that fails may be sent again in pieces (:meth:`piece_size`) or
    item by item (:meth:`splits`), so one bad item fails alone."""

    def __init__(self) -> None:
        self.pending: dict[tuple, list[Item]] = {}
        self.timers: dict[tuple, asyncio.TimerHandle] = {}
        self.tasks: set[asyncio.Task] = set()
        self.requests = 0  # batches sent, for tests and curiosity

    @classmethod
    def running(cls) -> "Coalescer":
        """This class's coalescer of the running event loop (made at its first call, dropped with the loop)."""
        per_class = _running.setdefault(asyncio.get_running_loop(), {})
        if cls not in per_class:
            per_class[cls] = cls()
        return per_class[cls]

    def submit(self, key: tuple, item: dict[str, Any], max_wait: float, max_items: int) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        queue = self.pending.setdefault(key, [])
        queue.append((item, future))
        if len(queue) >= max_items:
            self.flush(key)
        elif key not in self.timers:
            self.timers[key] = loop.call_later(max_wait, self.flush, key)
        return future

    def flush(self, key: tuple) -> None:
        timer = self.timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        waiting = [(item, f) for item, f in self.pending.pop(key, []) if not f.done()]
        if not waiting:
            return
        # items without an optional field (None) cannot share a request with items that have it
        groups: dict[tuple[str, ...], list[Item]] = {}
        for item, future in waiting:
            groups.setdefault(tuple(sorted(item)), []).append((item, future))
        for names, group in groups.items():
            task = asyncio.ensure_future(self.send(key, names, group))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def post(self, key: tuple, body: dict[str, list[Any]]) -> Mapping[str, Any]:
        """One batch's ``logratio``, ``p_yes`` and ``verdict`` columns (a list per output, one value per item)."""
        raise NotImplementedError(f"{type(self).__name__} must say how a batch is scored (post).")

    async def piece_size(self, key: tuple, err: BaseException, body: Mapping[str, Any], n: int) -> int | None:
        """For a batch of ``n`` items that failed with ``err``: the items per piece to send again, or None (default)."""
        return None

    def splits(self, err: BaseException) -> bool:
        """Whether ``err`` may be one item's fault, so that each item of the batch is sent again alone (default: no)."""
        return False

    async def send(self, key: tuple, names: tuple[str, ...], group: list[Item]) -> None:
        body = {name: [item[name] for item, _ in group] for name in names}
        self.requests += 1
        try:
            answer = await self.post(key, body)
        except BaseException as err:  # noqa: BLE001 - every waiting caller gets the error
            try:
                size = await self.piece_size(key, err, body, len(group))
            except Exception:  # noqa: BLE001 - no /health answer: the error below stands
                size = None
            if size is not None:  # a group above the server's limits: sent again in pieces it takes, each failing alone
                await asyncio.gather(*(self.send(key, names, group[s : s + size]) for s in range(0, len(group), size)))
                return
            if self.splits(err) and len(group) > 1:  # one bad item: not the others
                await asyncio.gather(*(self.send(key, names, [one]) for one in group))
                return
            for _, future in group:
                if not future.done():
                    future.set_exception(err)
            if not isinstance(err, Exception):
                raise
            return
        for i, (_, future) in enumerate(group):
            if not future.done():
                future.set_result({output: answer[output][i] for output in OUTPUTS})
