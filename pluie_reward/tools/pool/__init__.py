"""A pool of judges on Ray Serve: the judge server's API served by N replicas behind Ray's proxy, autoscaled on queue
length, fractional GPUs per replica (``pluie-reward pool``; ``pip install 'pluie-reward[pool]'``; Ray imported lazily).

Example:
    >>> from pluie_reward.serving.client import RemotePluieReward
    >>> reward = RemotePluieReward("http://127.0.0.1:8000")  # a TRL reward scored by `pluie-reward pool`
"""

from .deployment import JudgeReplica, PoolOptions, deploy, judge_deployment, pool_url, shutdown, start_ray

__all__ = ["JudgeReplica", "PoolOptions", "deploy", "judge_deployment", "pool_url", "shutdown", "start_ray"]
