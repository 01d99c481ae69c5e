"""Torch's CPU threads on a machine other processes share: waiting threads sleep instead of spinning, and there
are no more of them than the cores other work leaves free; on idle cores, torch's own setting.

An OpenMP thread that waits for the others of its team spins by default (GNU OpenMP, torch's on Linux). On a
CPU that other processes also use, the spinning threads take the cores from the working ones: measured on 2
cores at load 5-7 (alternated fresh processes, 2 forward/backward passes and a 20-token generate of the
embedded 135M model, 2026-12-07), 78-136 s with 2 spinning threads against 21-32 s with one thread and 25-27 s
with 2 sleeping ones; a default judge's forward pass was ~20x slower at load 11 (11.5 s against 0.5 s for 27
tokens). A sleeping thread that waits for a partner the scheduler does not run stalls too: the GRPO smoke run
took 210-249 s with 2 sleeping threads on 2 cores at load 5, 166 s with one (scripts/threads_ab.py, alternated).
On idle cores it is the other way round: the GRPO smoke run took 57 s with torch's 2 spinning threads against
75-79 s with 2 or 1 sleeping ones (2 cores, alternated, 2026-12-07). So :func:`fit_threads` reads how busy the
CPU is now (``/proc/stat`` over a quarter of a second, not the 1-minute load average, which still counts the
command that ended a moment ago) and changes nothing when it is idle. The command line and the examples call it
before torch loads, and the package's fresh processes inherit it; ``OMP_WAIT_POLICY`` or ``OMP_NUM_THREADS`` set
by the user are kept.

Example:
    >>> import os
    >>> saved = dict(os.environ)
    >>> for name in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS"):
    ...     _ = os.environ.pop(name, None)
    >>> _ = fit_threads(busy=0.2, cpus=2); "OMP_WAIT_POLICY" in os.environ  # idle: torch's own setting
    False
    >>> _ = fit_threads(busy=1.6, cpus=2); os.environ["OMP_WAIT_POLICY"], os.environ["OMP_NUM_THREADS"]  # busy
    ('PASSIVE', '1')
    >>> os.environ.clear(); os.environ.update(saved)
"""

from __future__ import annotations

import os
import sys
import time


def busy_cores(seconds: float = 0.25) -> float:
    """How many cores other processes keep busy now: the share of CPU time not idle in ``/proc/stat`` over
    ``seconds`` (this process sleeps meanwhile), times the cores this process may use; where there is no
    ``/proc/stat`` (macOS, Windows), the 1-minute load average (0 where there is none).

    Returns:
        Busy cores, from 0 to the cores this process may use.
    """
    cpus = available_cpus()
    try:
        def sample() -> tuple[int, int]:
            with open("/proc/stat", encoding="ascii") as stat:
                ticks = [int(t) for t in stat.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
            return ticks[3] + ticks[4], sum(ticks)

        idle, total = sample()
        time.sleep(seconds)
        idle2, total2 = sample()
        return cpus * (1 - (idle2 - idle) / (total2 - total))
    except (OSError, ValueError, IndexError, ZeroDivisionError):
        return min(float(cpus), os.getloadavg()[0]) if hasattr(os, "getloadavg") else 0.0


def available_cpus() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def fit_threads(busy: float | None = None, cpus: int | None = None) -> bool:
    """When other work keeps more than half a core busy: make torch's waiting OpenMP threads sleep
    (``OMP_WAIT_POLICY=PASSIVE``) and run one thread per core left free (``OMP_NUM_THREADS``, at least 1); on an idle
    CPU, nothing (torch's own thread count, spinning: fastest there). A variable the user set is kept.

    OpenMP reads the variables once, when torch is first imported: call this before.

    Args:
        busy: busy cores (default: :func:`busy_cores` measures them).
        cpus: the cores this process may use (default: :func:`available_cpus`).

    Returns:
        Whether they apply to this process: False when torch was imported already (its child processes still
        inherit the variables).
    """
    cpus = available_cpus() if cpus is None else cpus
    busy = busy_cores() if busy is None else busy
    if busy > 0.5:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, min(cpus, round(cpus - busy)))))
    return "torch" not in sys.modules
