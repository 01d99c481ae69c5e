"""Tools built on :meth:`~pluie_reward.Judge.score`: the command line, evaluation, the benchmark and the judge server."""
