"""Throughput of the judge pool with 1 and 2 replicas, beside ``pluie-reward serve``, in one run.

On one local Ray cluster, each configuration serves the same judge (default ``Judge.load()``), fresh each time,
under the load of :mod:`pluie_reward.tools.bench.server_load`; the configurations run ``rounds`` times in turn (a
change in the machine's load shows between rounds, not configurations). On C CPUs: ``serve`` (one process),
``1 x C`` (one replica, C torch threads) and ``2 x C/2`` (two replicas splitting the same CPUs).

Example:
    $ pluie-reward bench pool --clients 8 --requests 3 --items 8 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from functools import partial
from typing import Any, Sequence

from ...core.judge import Judge
from ..bench.measure import Clock, load_average
from ..bench.server_load import ServerLoad, check_load, format_server_table, free_port, load_url, request_batches, server_load
from .deployment import PoolOptions, deploy, shutdown, start_ray


def pool_load(replicas: int, cpus_per_replica: float, batches: list[dict[str, list[str]]], clients: int, requests: int,
              items: int, template: str = "para-fs", model: str | None = None) -> ServerLoad:
    """Deploy a pool of ``replicas`` on the connected Ray cluster, load it, delete it."""
    from ray import serve

    label = f"pool {replicas} x {cpus_per_replica:g} CPU"
    result = ServerLoad(label, clients, requests, items)
    started = Clock()
    options = PoolOptions(replicas=replicas, num_cpus=cpus_per_replica, max_ongoing_requests=64)
    url = deploy(partial(Judge.load, model), template, options, port=free_port(), log_level="warning",
                 app_name="pluie-bench")
    result.start_seconds = started.seconds
    try:
        asyncio.run(load_url(url, batches, clients, result))
    finally:
        serve.delete("pluie-bench")
    return result


def run(clients: int, requests: int, items: int, rounds: int, pairs: Sequence[tuple[str, str]], *,
        template: str = "para-fs", model: str | None = None, with_serve: bool = True, worker_niceness: int = 0,
        log: Any = print) -> list[ServerLoad]:
    """Every configuration, ``rounds`` times in turn (see the module's docstring)."""
    check_load(clients, requests, items, len(pairs))
    batches = request_batches(pairs, clients, requests, items)
    cpus = os.cpu_count() or 2
    results: list[ServerLoad] = []
    start_ray(num_cpus=cpus, log_to_driver=False, worker_niceness=worker_niceness)
    try:
        for k in range(rounds):
            if with_serve:
                log(f"round {k + 1}: pluie-reward serve ...")
                results.append(server_load("transformers", pairs, clients, requests, items, template=template, model=model))
                results[-1].engine = "serve (1 process)"
            for replicas in (1, 2):
                log(f"round {k + 1}: pool of {replicas} ...")
                results.append(pool_load(replicas, cpus / replicas, batches, clients, requests, items, template, model))
    finally:
        shutdown(None)
    return results


def run_args(args: argparse.Namespace, pairs: Sequence[tuple[str, str]]) -> list[ServerLoad]:
    """``pluie-reward bench pool``: every configuration (:func:`run`) on ``pairs``, its table on stdout.

    Returns:
        The loads measured, in order (``pluie-reward bench`` writes them with ``--json``).
    """
    load = load_average()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results = run(args.clients, args.requests, args.items, args.rounds, pairs, template=args.template, model=args.model,
                  with_serve=not args.no_serve, worker_niceness=args.worker_niceness,
                  log=lambda text: print(text, file=sys.stderr, flush=True))
    print(f"# judge pool, {started}: {os.cpu_count()} CPUs, load average {load} before, {load_average()} after; "
          f"Ray workers at nice {args.worker_niceness}\n")
    print(format_server_table(results).replace("engine", "configuration", 1))
    return results
