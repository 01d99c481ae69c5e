"""Torch's CPU threads on a machine other processes share: waiting threads sleep instead of spinning, and there
are no more of them than the cores other work leaves free.

An OpenMP thread that waits for the others of its team spins by default (GNU OpenMP, torch's on Linux). On a
CPU that other processes also use, the spinning threads take the cores from the working ones: measured on 2
cores at load 5-7 (alternated fresh processes, 2 forward/backward passes and a 20-token generate of the
embedded 135M model, 2026-12-07), 78-136 s with 2 spinning threads against 21-32 s with one thread and 25-27 s
with 2 sleeping ones; a default judge's forward pass was ~20x slower at load 11 (11.5 s against 0.5 s for 27
tokens). A sleeping thread that waits for a partner the scheduler does not run stalls too: the GRPO smoke run
took 210-249 s with 2 sleeping threads on 2 cores at load 5, 166 s with one (scripts/threads_ab.py, alternated).
The command line and the examples call :func:`fit_threads` before torch loads, and the package's fresh
processes inherit it; ``OMP_WAIT_POLICY=ACTIVE`` or ``OMP_NUM_THREADS`` set by the user are kept.

Example:
    >>> import os
    >>> saved = dict(os.environ)
    >>> _ = fit_threads(); os.environ["OMP_WAIT_POLICY"] in ("PASSIVE", "ACTIVE", "passive", "active")
    True
    >>> int(os.environ["OMP_NUM_THREADS"]) >= 1
    True
    >>> os.environ.clear(); os.environ.update(saved)
"""

from __future__ import annotations

import os
import sys


def fit_threads() -> bool:
    """Make torch's waiting OpenMP threads sleep (``OMP_WAIT_POLICY=PASSIVE``) and run one thread per core the
    1-minute load average leaves free (``OMP_NUM_THREADS``, at least 1; on idle cores torch's own default), each
    unless the variable is already set.

    OpenMP reads the variables once, when torch is first imported: call this before.

    Returns:
        Whether they apply to this process: False when torch was imported already (its child processes still
        inherit the variables).
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    busy = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, min(cpus, round(cpus - busy)))))
    return "torch" not in sys.modules
