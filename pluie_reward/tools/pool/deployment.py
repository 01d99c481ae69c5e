"""The judge pool: the judge server's app (:func:`~pluie_reward.serving.app.create_app`, its HTTP API unchanged) as
a Ray Serve deployment, N replicas each with its own judge behind Ray's proxy. Ray Serve routes, retries, replaces
dead replicas, autoscales and places them; who retries what: docs/pool.md. Ray is imported inside the functions
(``pip install 'pluie-reward[pool]'``).

Example:
    >>> from functools import partial
    >>> from pluie_reward import Judge
    >>> start_ray()  # a local Ray cluster; start_ray("ray://head:10001") joins one  # doctest: +SKIP
    >>> url = deploy(partial(Judge.load), "para-fs", PoolOptions(replicas=2), port=8000)  # doctest: +SKIP
    >>> url                                                    # doctest: +SKIP
    'http://127.0.0.1:8000'
    >>> shutdown()                                             # the pool, then the Ray cluster started here  # doctest: +SKIP
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from typing import Any, Callable

from ...common.errors import PluieError

DEFAULT_APP = "pluie"
NICENESS_VARIABLE = "RAY_worker_niceness"  # Ray's worker_niceness setting (ray_constants.RAY_WORKER_NICENESS)
DEPLOYMENT = "PluieJudge"


class PoolStartError(PluieError, RuntimeError):
    """The pool did not start: a replica failed to load its judge or build its app (the message ends with the
    replica's exception), or Ray could not place the replicas."""


@dataclass(frozen=True)
class PoolOptions:
    """How many replicas the pool runs and what each one gets.

    Args:
        replicas: a fixed number of replicas (ignored when ``max_replicas`` is set).
        min_replicas, max_replicas: ``max_replicas`` set: Ray Serve autoscales on queue length between the two
            (``min_replicas`` 0 scales to zero: the first request then waits for a replica to load).
        target_ongoing_requests: with autoscaling, the requests in flight or queued per replica aimed at.
        upscale_delay_s, downscale_delay_s: with autoscaling, how long the load stays above (below) the target
            before a replica is added (removed) (None: Ray's, 30 s and 600 s).
        look_back_period_s: with autoscaling, the window the load is averaged over (None: Ray's, 30 s; Ray
            wants it above its 10 s metrics interval).
        max_ongoing_requests: requests a replica holds at once, batched together (Ray's default, 5, cannot fill
            a batch when each request is one sample, as OpenRLHF sends).
        num_cpus: CPUs per replica (Ray sets ``OMP_NUM_THREADS`` to it: torch's threads).
        num_gpus: GPUs per replica: a fraction (0.25: four replicas on one GPU; Ray only counts) or a whole number.
        health_check_period_s: seconds between Ray's health checks of a replica (a dead or hung one is replaced).
        graceful_shutdown_timeout_s: seconds a replica being removed waits for its requests (None: Ray's, 20).
        max_constructor_retry_count: attempts at starting a replica whose judge fails to load (Ray's default,
            20, hides a wrong model name for minutes).

    Example:
        >>> PoolOptions(replicas=2, num_cpus=1).deployment_options()["num_replicas"]
        2
        >>> PoolOptions(min_replicas=1, max_replicas=4, num_gpus=0.25).deployment_options()["autoscaling_config"]
        {'min_replicas': 1, 'max_replicas': 4, 'target_ongoing_requests': 16.0}
        >>> PoolOptions(max_replicas=2, upscale_delay_s=5).deployment_options()["autoscaling_config"]["upscale_delay_s"]
        5.0
        >>> PoolOptions(max_replicas=2, look_back_period_s=15).deployment_options()["autoscaling_config"]["look_back_period_s"]
        15.0
        >>> PoolOptions(look_back_period_s=5)
        Traceback (most recent call last):
        ...
        ValueError: look_back_period_s needs max_replicas (it tunes autoscaling).
        >>> PoolOptions(upscale_delay_s=5)
        Traceback (most recent call last):
        ...
        ValueError: upscale_delay_s and downscale_delay_s need max_replicas (they tune autoscaling).
        >>> PoolOptions(num_gpus=1.5)
        Traceback (most recent call last):
        ...
        ValueError: num_gpus must be a fraction below 1 or a whole number, got 1.5.
    """

    replicas: int = 1
    min_replicas: int | None = None
    max_replicas: int | None = None
    target_ongoing_requests: float = 16.0
    upscale_delay_s: float | None = None
    downscale_delay_s: float | None = None
    look_back_period_s: float | None = None
    max_ongoing_requests: int = 64
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    health_check_period_s: float = 10.0
    graceful_shutdown_timeout_s: float | None = None
    max_constructor_retry_count: int = 3

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas must be at least 1, got {self.replicas}.")
        if self.max_replicas is None and self.min_replicas is not None:
            raise ValueError("min_replicas needs max_replicas (autoscaling between the two).")
        if self.max_replicas is not None:
            low = 1 if self.min_replicas is None else self.min_replicas
            if self.max_replicas < 1 or not 0 <= low <= self.max_replicas:
                raise ValueError(f"autoscaling needs 0 <= min_replicas <= max_replicas and max_replicas >= 1, "
                                 f"got {self.min_replicas} and {self.max_replicas}.")
        delays = [d for d in (self.upscale_delay_s, self.downscale_delay_s) if d is not None]
        if delays and self.max_replicas is None:
            raise ValueError("upscale_delay_s and downscale_delay_s need max_replicas (they tune autoscaling).")
        if self.look_back_period_s is not None:
            if self.max_replicas is None:
                raise ValueError("look_back_period_s needs max_replicas (it tunes autoscaling).")
            if not self.look_back_period_s > 0:
                raise ValueError(f"look_back_period_s must be > 0, got {self.look_back_period_s}.")
        if any(not d >= 0 for d in delays):
            raise ValueError(f"upscale_delay_s and downscale_delay_s must be >= 0, got {self.upscale_delay_s} and "
                             f"{self.downscale_delay_s}.")
        if self.max_ongoing_requests < 1 or not self.target_ongoing_requests > 0:
            raise ValueError("max_ongoing_requests must be >= 1 and target_ongoing_requests > 0.")
        if self.max_replicas is not None and self.target_ongoing_requests > self.max_ongoing_requests:
            raise ValueError(f"target_ongoing_requests ({self.target_ongoing_requests}) above max_ongoing_requests "
                             f"({self.max_ongoing_requests}) is never reached by one replica.")
        if self.num_cpus < 0 or self.num_gpus < 0:
            raise ValueError("num_cpus and num_gpus must be >= 0.")
        if self.num_gpus > 1 and self.num_gpus != int(self.num_gpus):
            raise ValueError(f"num_gpus must be a fraction below 1 or a whole number, got {self.num_gpus}.")
        if self.health_check_period_s <= 0 or self.max_constructor_retry_count < 1:
            raise ValueError("health_check_period_s must be > 0 and max_constructor_retry_count >= 1.")
        if self.graceful_shutdown_timeout_s is not None and self.graceful_shutdown_timeout_s < 0:
            raise ValueError("graceful_shutdown_timeout_s must be >= 0.")

    @property
    def autoscaling(self) -> bool:
        """Whether the pool autoscales (``max_replicas`` set)."""
        return self.max_replicas is not None

    def deployment_options(self) -> dict[str, Any]:
        """The keyword arguments of ``ray.serve.deployment`` these options stand for."""
        options: dict[str, Any] = {
            "ray_actor_options": {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus},
            "max_ongoing_requests": self.max_ongoing_requests,
            "health_check_period_s": self.health_check_period_s,
            "max_constructor_retry_count": self.max_constructor_retry_count,
        }
        if self.graceful_shutdown_timeout_s is not None:
            options["graceful_shutdown_timeout_s"] = self.graceful_shutdown_timeout_s
        if self.autoscaling:
            options["autoscaling_config"] = {
                "min_replicas": 1 if self.min_replicas is None else self.min_replicas,
                "max_replicas": self.max_replicas,
                "target_ongoing_requests": float(self.target_ongoing_requests),
            }
            for name in ("upscale_delay_s", "downscale_delay_s", "look_back_period_s"):
                if getattr(self, name) is not None:
                    options["autoscaling_config"][name] = float(getattr(self, name))
        else:
            options["num_replicas"] = self.replicas
        return options


class JudgeReplica:
    """One replica of the pool: loads a judge, warms it up on its template (:meth:`Judge.warm_up
    <pluie_reward.core.judge.Judge.warm_up>`: Ray sends requests once the constructor returns), then serves the
    judge server's app for it (``serve.ingress()`` calls :meth:`__serve_build_asgi_app__` and runs its lifespan).

    Args:
        load_judge: called once in the replica's process to make its judge (picklable: a module-level function
            or a ``functools.partial`` of one, e.g. ``partial(Judge.load, "...")``).
        template: the template the replica serves.
        server_options: :func:`~pluie_reward.serving.app.create_app`'s keyword arguments.
    """

    def __init__(self, load_judge: Callable[[], Any], template: Any, server_options: dict[str, Any]) -> None:
        self.judge = load_judge()
        self.judge.warm_up(template)
        self.template = template
        self.server_options = dict(server_options)

    def __serve_build_asgi_app__(self) -> Any:
        from ...serving.app import create_app  # optional: fastapi

        return create_app(self.judge, self.template, **self.server_options)


def check_server_options(server_options: dict[str, Any]) -> None:
    """A ``TypeError`` naming the unknown keywords, before any replica starts.

    Example:
        >>> check_server_options({"token": "s3cret", "max_wait_ms": 10})
        >>> check_server_options({"max_wait": 10})
        Traceback (most recent call last):
        ...
        TypeError: unknown judge server option(s) ['max_wait']; create_app takes ['mapping', 'token', ...
    """
    from ...serving import app as server_app  # optional: fastapi

    known = [name for name, p in inspect.signature(server_app.create_app).parameters.items() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(server_options) - set(known))
    if unknown:
        raise TypeError(f"unknown judge server option(s) {unknown}; create_app takes {known}.")


def judge_deployment(load_judge: Callable[[], Any], template: Any = "para-fs", options: PoolOptions | None = None, *,
                     name: str = DEPLOYMENT, **server_options: Any) -> Any:
    """The pool as a Ray Serve application (``Deployment.bind(...)``), ready for ``serve.run``.

    Args:
        load_judge: makes a replica's judge, in the replica (see :class:`JudgeReplica`).
        template: the template every replica serves.
        options: replicas and resources (default :class:`PoolOptions`: one replica, one CPU).
        name: the deployment's name in Ray Serve.
        server_options: the judge server's options (``token``, ``max_wait_ms``, ``mapping``, ...: the
            keyword arguments of :func:`~pluie_reward.serving.app.create_app`).

    Example:
        >>> from pluie_reward.testing import make_tiny_judge
        >>> app = judge_deployment(make_tiny_judge, "para-fs", PoolOptions(replicas=2), max_wait_ms=10)  # doctest: +SKIP
        >>> serve.run(app, name="pluie", route_prefix="/")                                               # doctest: +SKIP
    """
    from ray import serve

    check_server_options(server_options)
    options = options or PoolOptions()
    replica = serve.deployment(serve.ingress()(JudgeReplica), name=name, **options.deployment_options())
    return replica.bind(load_judge, template, server_options)


def start_ray(
    address: str | None = None, *, num_cpus: float | None = None, num_gpus: float | None = None, log_to_driver: bool = True,
    worker_niceness: int | None = 0,
) -> bool:
    """Join the Ray cluster at ``address`` (``"auto"``, ``"head-host:6379"``, ``"ray://head:10001"``) or start a
    local one (no dashboard); nothing when Ray is already initialised in this process.

    Args:
        num_cpus, num_gpus: the local cluster's resources (default: what Ray detects).
        log_to_driver: print the replicas' logs here.
        worker_niceness: the nice value of the local cluster's workers, the replicas included (default 0; None
            keeps Ray's 15, at which Serve's proxy can miss its start-up check on a busy machine: docs/pool.md).
            ``RAY_worker_niceness`` in the environment wins; a joined cluster keeps its own.

    Returns:
        True when this call started or joined Ray (so :func:`shutdown` should disconnect it).
    """
    import ray

    if ray.is_initialized():
        return False
    if address is not None:
        if num_cpus is not None or num_gpus is not None:
            raise ValueError("num_cpus and num_gpus size a local cluster; a joined cluster has its own (ray start --num-cpus).")
        ray.init(address=address, log_to_driver=log_to_driver)
        return True
    # Ray's raylet reads its configuration from RAY_<name> variables of the environment it starts in
    set_niceness = worker_niceness is not None and NICENESS_VARIABLE not in os.environ
    if set_niceness:
        os.environ[NICENESS_VARIABLE] = str(worker_niceness)
    try:
        ray.init(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False, log_to_driver=log_to_driver)
    finally:
        if set_niceness:
            del os.environ[NICENESS_VARIABLE]
    return True


def pool_url(host: str = "127.0.0.1", port: int = 8000, route_prefix: str = "/") -> str:
    """The URL clients use for a pool whose Serve proxy listens on ``host:port`` (``0.0.0.0`` shown as ``127.0.0.1``).

    Example:
        >>> pool_url("0.0.0.0", 8000), pool_url("127.0.0.1", 8001, "/judge")
        ('http://127.0.0.1:8000', 'http://127.0.0.1:8001/judge')
    """
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return f"http://{shown}:{port}{route_prefix.rstrip('/')}"


def deploy(load_judge: Callable[[], Any], template: Any = "para-fs", options: PoolOptions | None = None, *,
           host: str = "127.0.0.1", port: int = 8000, app_name: str = DEFAULT_APP, route_prefix: str = "/",
           log_level: str | None = None, **server_options: Any) -> str:
    """Deploy the pool on the connected Ray cluster; wait until every replica has loaded its judge.

    Starts Serve's HTTP proxy on ``host:port`` unless Serve runs already (then its host and port stay, and the URL
    says so). Deploying again under the same ``app_name`` replaces the replicas in place.

    Args:
        load_judge, template, options, server_options: see :func:`judge_deployment`.
        host, port: where Serve's proxy listens (default 127.0.0.1: this machine only).
        app_name, route_prefix: the application's name and URL prefix in Serve.
        log_level: the replicas' log level (default Ray's, INFO, which logs every request).

    Returns:
        The pool's base URL (``http://127.0.0.1:8000``): ``POST <url>/score``.

    Raises:
        PoolStartError: the deployment failed; the message ends with the replica's exception.
    """
    from ray import serve

    app = judge_deployment(load_judge, template, options, **server_options)
    serve.start(http_options={"host": host, "port": port})
    logging_config = {"log_level": log_level.upper()} if log_level else None
    try:
        serve.run(app, name=app_name, route_prefix=route_prefix, logging_config=logging_config)
    except RuntimeError as err:
        raise PoolStartError(f"{err} {_failure(app_name)}".strip()) from None
    host, port = _serving_address(host, port)
    return pool_url(host, port, route_prefix)


def _failure(app_name: str) -> str:
    """The last line of the failed deployment's message (the replica's exception), or ''."""
    from ray import serve

    try:
        deployments = serve.status().applications[app_name].deployments
    except (KeyError, AttributeError):
        return ""
    lines = [line.strip() for d in deployments.values() for line in (d.message or "").splitlines() if line.strip()]
    return f"Last error: {lines[-1]}" if lines else ""


def _serving_address(host: str, port: int) -> tuple[str, int]:
    """Host and port of the running Serve proxy (Serve may have run already); the ones asked for when Ray does not say."""
    try:
        from ray.serve.context import _get_global_client

        config = _get_global_client().http_config
        return str(config.host), int(config.port)
    except Exception:  # a private API of Ray Serve: the URL then assumes the options were applied
        return host, port


def shutdown(app_name: str | None = DEFAULT_APP, *, stop_ray: bool = True) -> None:
    """Delete the pool (its replicas finish their requests first), or all of Serve when ``app_name`` is None; then
    disconnect from Ray (``stop_ray``: a local cluster started by :func:`start_ray` stops)."""
    import ray
    from ray import serve

    if ray.is_initialized():
        if app_name is None:
            serve.shutdown()
        else:
            serve.delete(app_name)
        if stop_ray:
            ray.shutdown()
