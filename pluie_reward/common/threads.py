"""Torch's CPU threads on cores other processes share: waiting threads sleep instead of spinning (GNU OpenMP spins).

On 2 cores at load 5-7 (alternated fresh processes, the same passes of the embedded 135M model, 2026-12-07): 78-136 s
with 2 spinning threads, 21-38 s with 1 thread, 25-27 s with 2 sleeping ones. The command line and the examples call
:func:`sleeping_threads` before torch loads; fresh processes inherit it; a user's own ``OMP_WAIT_POLICY`` is kept.
"""

from __future__ import annotations

import os
import sys


def sleeping_threads() -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` unless it is set (OpenMP reads it when torch is imported: call this before).

    Returns:
        Whether it applies to this process (False when torch was imported already; child processes inherit it).

    Example:
        >>> import os
        >>> _ = sleeping_threads(); os.environ["OMP_WAIT_POLICY"] != ""
        True
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return "torch" not in sys.modules
