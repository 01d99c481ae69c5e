"""A bounded least-recently-used cache of results, keyed by everything a result depends on.

Keys hold the engine's state (so results never outlive a weight change), the answer token ids and
the full prompt token ids.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Hashable, Iterable


class ResultCache:
    """At most ``max_size`` results; looking a key up makes it the most recently used.

    Example:
        >>> cache = ResultCache(2)
        >>> cache.put("a", 1.0); cache.put("b", 2.0)
        >>> cache.get("a")
        1.0
        >>> cache.put("c", 3.0)          # evicts "b", the least recently used
        >>> "b" in cache, "a" in cache
        (False, True)
    """

    def __init__(self, max_size: int = 4096) -> None:  # checked by JudgeConfig (cache_size)
        self.max_size = max_size
        self._items: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The cached value (now the most recently used), or ``default``."""
        if key not in self._items:
            return default
        self._items.move_to_end(key)
        return self._items[key]

    def put(self, key: Hashable, value: Any) -> None:
        """Store ``value``, evicting the least recently used entries beyond ``max_size``."""
        if self.max_size == 0:
            return
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.max_size:
            self._items.popitem(last=False)

    def update(self, pairs: Iterable[tuple[Hashable, Any]]) -> None:
        """``put`` each ``(key, value)`` in order."""
        for key, value in pairs:
            self.put(key, value)

    def clear(self) -> None:
        """Forget everything."""
        self._items.clear()

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)
