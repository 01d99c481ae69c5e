"""``pluie-reward pool``: a pool of judge servers on Ray Serve (Ray is imported only when it runs); every option of
``pluie-reward serve`` plus the pool's (replicas or autoscaling bounds, CPUs and GPUs per replica, the cluster)."""

from __future__ import annotations

import argparse
import re
import signal
import sys
import time
from functools import partial
from typing import Any

from ...core.template import load_template
from ..cli.common import chat_template_kwargs, check_device, check_engine_options, judge_from_args
from ..cli.registry import command
from ..server.cli import _configure as configure_server, server_options
from ..shared import UsageError, nonneg_float, nonneg_int, positive_float, positive_int
from .deployment import PoolOptions, PoolStartError, deploy, shutdown, start_ray

# what judge_from_args reads; the replicas get these (not the token, the limits...)
JUDGE_OPTIONS = ("model", "adapter", "device", "dtype", "batch_tokens", "chat_template_kwargs", "engine", "url",
                 "tensor_parallel_size", "gpu_memory_utilization")


def _configure(p: argparse.ArgumentParser) -> None:
    configure_server(p)
    g = p.add_argument_group("pool (Ray Serve)")
    g.add_argument("--replicas", type=positive_int, default=1, help="replicas, each with its own judge (default 1)")
    g.add_argument("--min-replicas", type=nonneg_int, default=None, help="autoscale from this many (with --max-replicas; 0 scales to zero)")
    g.add_argument("--max-replicas", type=positive_int, default=None,
                   help="autoscale up to this many on queue length (replaces --replicas)")
    g.add_argument("--target-ongoing-requests", type=positive_float, default=16.0,
                   help="autoscaling aims at this many requests in flight or queued per replica (default 16)")
    g.add_argument("--upscale-delay", type=nonneg_float, default=None,
                   help="autoscaling: seconds the load stays above the target before a replica is added (Ray's default 30)")
    g.add_argument("--downscale-delay", type=nonneg_float, default=None,
                   help="autoscaling: seconds the load stays below the target before a replica is removed (Ray's default 600)")
    g.add_argument("--max-ongoing-requests", type=positive_int, default=64,
                   help="requests a replica holds at once, batched together; the rest queue in Ray's proxy (default 64)")
    g.add_argument("--replica-cpus", type=positive_float, default=1.0, help="CPUs per replica, also its torch threads (default 1)")
    g.add_argument("--replica-gpus", type=nonneg_float, default=0.0,
                   help="GPUs per replica: a fraction shares a GPU, e.g. 0.25 (default 0)")
    g.add_argument("--address", default=None,
                   help="join this Ray cluster (auto, head-host:6379, ray://head:10001) instead of starting one here")
    g.add_argument("--num-cpus", type=positive_float, default=None, help="CPUs of the local Ray cluster started here (default: all)")
    g.add_argument("--name", default="pluie", help="the application's name in Ray Serve (default pluie)")
    g.add_argument("--detach", action="store_true",
                   help="with --address: deploy and exit, leaving the pool in the cluster (stop it with --stop)")
    g.add_argument("--stop", action="store_true", help="with --address: remove the pool --name from the cluster, then exit")


def load_judge(options: dict[str, Any]) -> Any:
    """A replica's judge from the command line's judge options (run in the replica's process)."""
    return judge_from_args(argparse.Namespace(**options))


# PoolOptions' fields as the command line spells them (the options' values; its messages name the fields)
FLAGS = {"replicas": "--replicas", "min_replicas": "--min-replicas", "max_replicas": "--max-replicas",
         "target_ongoing_requests": "--target-ongoing-requests", "max_ongoing_requests": "--max-ongoing-requests",
         "num_cpus": "--replica-cpus", "num_gpus": "--replica-gpus", "graceful_shutdown_timeout_s": "--graceful-timeout",
         "upscale_delay_s": "--upscale-delay", "downscale_delay_s": "--downscale-delay"}


def pool_options(args: argparse.Namespace) -> PoolOptions:
    """The :class:`~pluie_reward.tools.pool.deployment.PoolOptions` of the command line.

    Raises:
        UsageError: the options' own check failed; its message names the flags.

    Example:
        >>> pool_options(argparse.Namespace(replicas=0, min_replicas=None, max_replicas=None, target_ongoing_requests=16.0,
        ...                                 max_ongoing_requests=64, replica_cpus=1.0, replica_gpus=0.0, graceful_timeout=None,
        ...                                 upscale_delay=None, downscale_delay=None))
        Traceback (most recent call last):
        ...
        pluie_reward.tools.shared.UsageError: --replicas must be at least 1, got 0.
    """
    try:
        return PoolOptions(**{name: getattr(args, flag[2:].replace("-", "_")) for name, flag in FLAGS.items()})
    except ValueError as err:
        message = re.sub(r"\b(" + "|".join(FLAGS) + r")\b", lambda m: FLAGS[m.group(1)], str(err))
        raise UsageError(message) from None


def check_pool_args(args: argparse.Namespace) -> PoolOptions:
    """Refuse what a pool cannot do, before Ray starts; the pool's options when all is well."""
    if args.engine == "remote":
        raise UsageError("--engine remote: a pool of clients of vLLM servers adds nothing; run `pluie-reward serve --engine remote`, "
                         "or scale the vLLM server itself (vllm serve --data-parallel-size N).")
    check_engine_options(args)
    if args.engine == "vllm" and (args.tensor_parallel_size or 1) > 1:
        raise UsageError("--tensor-parallel-size > 1 inside a pool replica is not supported: use one replica per GPU, or a "
                         "tensor-parallel `pluie-reward serve --engine vllm`.")
    if args.detach and args.address is None:
        raise UsageError("--detach needs --address: a local Ray cluster stops with this command.")
    if args.stop and (args.address is None or args.detach):
        raise UsageError("--stop needs --address (the cluster the pool runs in), and not --detach.")
    if args.address is not None and args.num_cpus is not None:
        raise UsageError("--num-cpus sizes the local cluster; a joined cluster has its own (ray start --num-cpus).")
    options = pool_options(args)
    if (args.device or "").startswith("cuda") and args.replica_gpus == 0:
        raise UsageError(f"--device {args.device} needs --replica-gpus > 0: Ray places replicas by the GPUs they ask for "
                         "(without, a replica may land on a node with no GPU, and nothing accounts for its GPU use).")
    if args.address is None:
        check_device(args.device)  # the replicas run on this machine
    chat_template_kwargs(args)
    try:
        load_template(args.template)  # here rather than in every replica
    except (ValueError, OSError) as err:
        raise UsageError(str(err)) from None
    if args.address is None and args.num_cpus is not None:
        needed = args.replica_cpus * (args.max_replicas if args.max_replicas is not None else args.replicas)
        if needed > args.num_cpus:
            print(f"pluie-reward pool: warning: the replicas ask for {needed:g} CPUs and the cluster has {args.num_cpus:g}: "
                  "the others wait for CPUs (lower --replica-cpus).", file=sys.stderr)
    return options


def _connect(args: argparse.Namespace, serving: bool = False) -> bool | None:
    """Start the local Ray cluster, or join ``--address`` (``serving``: the server's app must import too); None after
    printing why not; a :class:`UsageError` when Ray, Serve or FastAPI is missing."""
    try:
        import ray  # noqa: F401
        from ray import serve  # noqa: F401

        if serving:
            from ...serving import app  # noqa: F401  # optional: fastapi
    except ModuleNotFoundError as err:
        raise UsageError(f"the pool needs {err.name}: pip install 'pluie-reward[pool]'") from None
    try:
        return start_ray(args.address, num_cpus=args.num_cpus)
    except (ConnectionError, RuntimeError) as err:
        chain, cause = [], err
        while cause is not None:
            chain.append(f"{type(cause).__name__}: {cause}")
            cause = cause.__cause__ or cause.__context__
        where = f"join the Ray cluster at {args.address}" if args.address else "start a local Ray cluster"
        hint = ""
        if any("AuthToken" in text or "AuthenticationError" in text for text in chain):
            hint = (" The cluster uses Ray's token authentication: run with RAY_AUTH_MODE=token and the cluster's token "
                    "where Ray looks for it (RAY_AUTH_TOKEN, or ~/.ray/auth_token).")
        print(f"pluie-reward pool: error: could not {where}: {str(err).strip().splitlines()[-1]}.{hint}", file=sys.stderr)
        return None


def _stop(args: argparse.Namespace) -> int:
    """``--stop``: delete the application ``--name`` from the cluster at ``--address``."""
    if _connect(args) is None:
        return 1
    import ray
    from ray import serve

    try:
        if args.name not in serve.status().applications:
            raise UsageError(f"no Serve application {args.name!r} in the cluster at {args.address} "
                             f"(it has {sorted(serve.status().applications)}).")
        serve.delete(args.name)
    finally:
        ray.shutdown()  # disconnects; the cluster keeps running
    print(f"pluie-reward pool: {args.name!r} removed.", flush=True)
    return 0


def _wait_for_signal() -> None:
    """Block until SIGINT or SIGTERM (both set here: a shell starting the command with ``&`` ignores SIGINT)."""
    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@command("pool", _configure)
def pool_command(args: argparse.Namespace) -> int:
    """Serve a pool of judges on Ray Serve: N replicas (or autoscaled) behind one URL, the judge server's API."""
    options = check_pool_args(args)
    if args.stop:
        return _stop(args)
    app_options = server_options(args, "pool")
    judge_options = {name: getattr(args, name, None) for name in JUDGE_OPTIONS}
    started = _connect(args, serving=True)
    if started is None:
        return 1
    try:
        url = deploy(partial(load_judge, judge_options), args.template, options, host=args.host, port=args.port,
                     app_name=args.name, log_level=args.log_level, **app_options)
    except PoolStartError as err:  # e.g. the judge did not load in a replica
        print(f"pluie-reward pool: error: the pool did not start: {err}", file=sys.stderr)
        shutdown(None if started and args.address is None else args.name, stop_ray=started)
        return 1
    if options.autoscaling:
        low = 1 if options.min_replicas is None else options.min_replicas
        size = f"{low}-{options.max_replicas} replicas (autoscaled on queue length)"
    else:
        size = f"{options.replicas} replica{'s' * (options.replicas > 1)}"
    print(f"pluie-reward pool: {size} serving {args.template!r} at {url}  (POST {url}/score, {url}/get_reward)", flush=True)
    if args.detach:
        print(f"pluie-reward pool: left running in the cluster; stop it with "
              f"`pluie-reward pool --address {args.address} --name {args.name} --stop`.", flush=True)
        return 0
    _wait_for_signal()
    print("pluie-reward pool: stopping (the replicas finish their requests) ...", file=sys.stderr, flush=True)
    shutdown(None if args.address is None else args.name, stop_ray=started)
    return 0
