"""The judge inside training and data pipelines: TRL rewards, Trainer callbacks, datasets helpers,
judge placement next to a policy, HTTP clients of the judge server (TRL, verl) and OpenRLHF's
in-process ``reward_func`` file (:mod:`.openrlhf`). Completions and field -> column mappings are
read through :mod:`pluie_reward.core.fields`, the same way everywhere."""
