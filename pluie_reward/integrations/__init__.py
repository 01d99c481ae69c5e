"""The judge inside training and data pipelines: TRL rewards, Trainer callbacks, datasets helpers,
judge placement next to a policy. Completions and field -> column mappings are read through
:mod:`pluie_reward.core.fields`, the same way everywhere. The judge server's clients (TRL, verl,
OpenRLHF) are in :mod:`pluie_reward.serving`."""
