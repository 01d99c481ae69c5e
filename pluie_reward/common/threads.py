"""Torch's CPU threads: where other processes keep the CPU busy, waiting threads sleep and there is one per free
core; on an idle CPU, torch's own setting (each was much slower in the other case: docs/cli.md). The command line
and the examples call :func:`fit_threads` before torch loads; a variable the user set is kept.

Example:
    >>> environ = {}
    >>> _ = fit_threads(busy=0.2, cpus=2, environ=environ); environ  # idle: torch's own setting
    {}
    >>> _ = fit_threads(busy=1.6, cpus=2, environ=environ); environ  # busy
    {'OMP_WAIT_POLICY': 'PASSIVE', 'OMP_NUM_THREADS': '1'}
"""

from __future__ import annotations

import os
import sys
import time
from typing import MutableMapping


def busy_cores(cpus: int, seconds: float = 0.25) -> float:
    """The cores other processes keep busy now: the share of CPU time not idle in ``/proc/stat`` over ``seconds``
    (the 1-minute load average still counts a command that just ended) times ``cpus``; else the load average."""
    try:
        readings = []
        for pause in (seconds, 0.0):
            with open("/proc/stat", encoding="ascii") as stat:
                ticks = [int(t) for t in stat.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
            readings.append((ticks[3] + ticks[4], sum(ticks)))  # idle + iowait, all
            time.sleep(pause)
        (idle, total), (idle2, total2) = readings
        return cpus * (1 - (idle2 - idle) / (total2 - total))
    except (OSError, ValueError, IndexError, ZeroDivisionError):
        return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


def fit_threads(busy: float | None = None, cpus: int | None = None, environ: MutableMapping[str, str] = os.environ) -> bool:
    """Other work keeps over half a core busy (``busy``, default :func:`busy_cores`): waiting OpenMP threads sleep
    (``OMP_WAIT_POLICY=PASSIVE``), one per core left free of ``cpus`` (``OMP_NUM_THREADS``, at least 1) in ``environ``;
    an idle CPU: nothing set. OpenMP reads the variables when torch is first imported: call this before.

    Returns:
        Whether they apply to this process: False when torch was imported already (its children inherit them).
    """
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    busy = busy_cores(cpus) if busy is None else busy
    if busy > 0.5:
        environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        environ.setdefault("OMP_NUM_THREADS", str(max(1, min(cpus, round(cpus - busy)))))
    return "torch" not in sys.modules
