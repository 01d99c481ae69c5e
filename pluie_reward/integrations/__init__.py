"""The judge inside training and data pipelines: TRL rewards, Trainer callbacks, datasets helpers,
judge placement next to a policy; and what the rewards share with the judge server's clients and the
tools: the completion text and the field -> column mapping (:mod:`.fields`), the reads of N-answer
templates (:mod:`.outputs`), copies and novelty (:mod:`.novelty`) and group-relative judging
(:mod:`.group`). The judge server's clients (TRL, verl, OpenRLHF) are in :mod:`pluie_reward.serving`."""
