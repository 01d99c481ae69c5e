"""Torch's CPU threads on a machine other processes share: waiting threads sleep instead of spinning.

An OpenMP thread that waits for the others of its team spins by default (GNU OpenMP, torch's on Linux). On a
CPU that other processes also use, the spinning threads take the cores from the working ones: measured on 2
cores at load 5-7 (alternated fresh processes, 2 forward/backward passes and a 20-token generate of the
embedded 135M model, 2026-12-07), 78-136 s with 2 spinning threads against 21-32 s with one thread and 25-27 s
with 2 sleeping ones; a default judge's forward pass was ~20x slower at load 11 (11.5 s against 0.5 s for 27
tokens). The command line and the examples call :func:`sleeping_threads` before torch loads, and the package's
fresh processes inherit it; ``OMP_WAIT_POLICY=ACTIVE`` (set by the user) keeps spinning threads.

Example:
    >>> import os
    >>> _ = sleeping_threads(); os.environ["OMP_WAIT_POLICY"] in ("PASSIVE", "ACTIVE", "passive", "active")
    True
"""

from __future__ import annotations

import os
import sys


def sleeping_threads() -> bool:
    """Make torch's waiting OpenMP threads sleep (``OMP_WAIT_POLICY=PASSIVE``) unless the variable is already set.

    OpenMP reads the variable once, when torch is first imported: call this before.

    Returns:
        Whether it applies to this process: False when torch was imported already (its child processes still
        inherit the variable).
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return "torch" not in sys.modules
