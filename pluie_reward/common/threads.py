"""Torch's CPU threads on shared cores: waiting threads sleep instead of spinning (GNU OpenMP spins), one per core other
work leaves free (a thread waiting for a partner that is not scheduled stalls). On 2 cores at load 5-7, 2026-12-07: 78-136 s
with 2 spinning threads, 25-27 s with 2 sleeping ones, 21-38 s with 1 (alternated fresh processes, the same passes of
the 135M model); the GRPO smoke run, 210-249 s with 2 sleeping threads, 166 s with 1 (scripts/threads_ab.py).
"""

from __future__ import annotations

import os
import sys


def fit_threads() -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` and ``OMP_NUM_THREADS`` to the cores the 1-minute load average leaves free (at
    least 1), each unless set: torch reads them when imported (the CLI and the examples call this before), child
    processes inherit them. Returns whether they apply to this process (False: torch was imported already).

    Example:
        >>> import os
        >>> saved = dict(os.environ)
        >>> _ = fit_threads(); int(os.environ["OMP_NUM_THREADS"]) >= 1 and os.environ["OMP_WAIT_POLICY"] != ""
        True
        >>> os.environ.clear(); os.environ.update(saved)
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    busy = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, min(cpus, round(cpus - busy)))))
    return "torch" not in sys.modules
