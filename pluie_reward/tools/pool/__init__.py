"""A pool of judges on Ray Serve: the judge server's API (``/score``, ``/get_reward``, ``/health``,
``/metrics``) served by N replicas behind Ray's proxy, with autoscaling on queue length and
fractional GPUs per replica (``pluie-reward pool``; ``pip install 'pluie-reward[pool]'``).

Ray is imported only inside the functions, so the command line works without Ray.

Example:
    >>> from pluie_reward.serving.client import RemotePluieReward
    >>> reward = RemotePluieReward("http://127.0.0.1:8000")  # a TRL reward scored by `pluie-reward pool`
"""

from .deployment import JudgeReplica, PoolOptions, deploy, judge_deployment, pool_url, shutdown, start_ray

__all__ = ["JudgeReplica", "PoolOptions", "deploy", "judge_deployment", "pool_url", "shutdown", "start_ray"]
