"""What the bench sections share, so their numbers read alike: timing, peak memory, cells, tables, load, fresh processes.

Example:
    >>> seconds, value, peak = timed(None, lambda: sum(range(1000)), rounds=3)
    >>> value, seconds > 0, peak.cuda_mb
    (499500, True, None)
    >>> cell(0.1234, ".1%"), cell(None), cell(None, none="not run"), cell(12)
    ('12.3%', '-', 'not run', '12')
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ..report import cell, markdown_table

ROOT = str(Path(__file__).resolve().parents[3])  # the checkout (or site-packages) holding this package


def synchronize(device: Any) -> bool:
    """Wait for the device's queued work; whether it is a CUDA device (``None`` and CPUs: nothing to wait for)."""
    if device is None:
        return False
    import torch

    if torch.device(device).type != "cuda":
        return False
    torch.cuda.synchronize(device)
    return True


def mib(n: float | None) -> float | None:
    """Bytes as MiB (None stays None)."""
    return None if n is None else n / 2**20


class PeakMemory:
    """Peak resident memory (RSS, sampled every few ms) and CUDA max allocated during a block.

    Args:
        device: the torch device whose CUDA peak is read (``None`` or a CPU: ``cuda_mb`` stays ``None``).
        interval: seconds between RSS samples.
        rss: sample the RSS in a thread (off: only the CUDA peak, nothing runs beside the timed work).
        processes: whose RSS is summed, listed on entry (default: this process).

    Example:
        >>> with PeakMemory() as peak:
        ...     _ = [0] * 10**6
        >>> peak.rss_mb > 0
        True
    """

    def __init__(self, device: Any = None, interval: float = 0.003, rss: bool = True,
                 processes: Callable[[], Sequence[Any]] | None = None) -> None:
        self.device, self.interval, self.rss, self.processes = device, interval, rss, processes
        self.rss_mb = self.start_rss_mb = 0.0
        self.cuda_mb: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self, processes: Sequence[Any]) -> None:
        while not self._stop.wait(self.interval):
            self.rss_mb = max(self.rss_mb, mib(sum(p.memory_info().rss for p in processes)))

    def __enter__(self) -> "PeakMemory":
        if synchronize(self.device):
            import torch

            torch.cuda.reset_peak_memory_stats(self.device)
        if self.rss:
            import psutil

            processes = list(self.processes()) if self.processes else [psutil.Process()]
            self.rss_mb = self.start_rss_mb = mib(sum(p.memory_info().rss for p in processes))
            self._thread = threading.Thread(target=self._sample, args=(processes,), daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if synchronize(self.device):
            import torch

            self.cuda_mb = mib(torch.cuda.max_memory_allocated(self.device))
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def timed(device: Any, run: Callable[[], Any], rounds: int = 1, warmup: bool = False,
          rss: bool = False) -> tuple[float, Any, PeakMemory]:
    """Time ``run`` on ``device`` (``None``: nothing to wait for; else its queued work waited for around each call).

    Args:
        rounds, warmup: timed calls, and one untimed call first.
        rss: sample the resident memory too (:class:`PeakMemory`).

    Returns:
        The median seconds of the timed calls, the last value, and their :class:`PeakMemory`.
    """
    if warmup:
        run()
    times, value = [], None
    with PeakMemory(device, rss=rss) as peak:
        for _ in range(rounds):
            synchronize(device)
            start = time.perf_counter()
            value = run()
            synchronize(device)
            times.append(time.perf_counter() - start)
    return statistics.median(times), value, peak


class Clock:
    """Seconds since it was made (``.seconds``), for spans that are not one call: a server's start, a whole run."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.start


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB: Linux ``VmHWM`` (``ru_maxrss`` keeps the parent's across fork+exec).

    Example:
        >>> peak_rss_mb() > 0
        True
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def column_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, Any, str | None]], none: str = "-") -> str:
    """A Markdown table of dict rows, one ``(header, key or function of the row, format spec)`` per column (with a
    spec: right-aligned; ``"s"`` for text that reads as a number).

    Example:
        >>> print(column_table([{"m": "a", "x": 0.5}], [("model", "m", None), ("share", "x", ".0%"), ("n", lambda r: 3, "d")]))
        | model | share | n |
        |---|---:|---:|
        | a | 50% | 3 |
    """
    cells = [[cell(get(row) if callable(get) else row[get], spec or "", none) for _, get, spec in columns] for row in rows]
    return markdown_table([header for header, _, _ in columns], cells, "".join("r" if spec else "l" for _, _, spec in columns))


def load_average() -> str:
    """The machine's 1, 5 and 15-minute load averages (``"?"`` where the system has none), for the reports."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"


def quiet_vllm_logs(environ: Any = None) -> Any:
    """vLLM's logs to stderr, warnings and up only, unless the user set them (the report is stdout).

    Example:
        >>> quiet_vllm_logs({})
        {'VLLM_LOGGING_LEVEL': 'WARNING', 'VLLM_LOGGING_STREAM': 'ext://sys.stderr'}
    """
    environ = os.environ if environ is None else environ
    environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    return environ


def child_env() -> dict[str, str]:
    """The environment of a child process: this package first on ``PYTHONPATH``, vLLM's logs quiet."""
    return quiet_vllm_logs({**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))})


def in_fresh_process(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` in a fresh Python process (memory and threads do not leak between runs): what it returned,
    through JSON. ``function`` is a module-level function of this package; the ``repr`` of ``args`` is Python.

    Raises:
        RuntimeError: the process failed (the end of its stderr in the message).
    """
    mark = "PLUIE-RESULT "
    code = (f"import json; from {function.__module__} import {function.__name__}; "
            f"print({mark!r} + json.dumps({function.__name__}(*{args!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env())
    lines = [line for line in done.stdout.splitlines() if line.startswith(mark)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{function.__name__}{args!r} failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len(mark):])
