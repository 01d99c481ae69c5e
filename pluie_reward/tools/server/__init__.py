"""``pluie-reward serve``: the command that starts the judge server of :mod:`pluie_reward.serving`."""
