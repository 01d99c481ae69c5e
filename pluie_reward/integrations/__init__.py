"""The judge inside training and data pipelines: TRL rewards, Trainer callbacks, datasets helpers,
judge placement next to a policy, and HTTP clients of the judge server (TRL, verl, OpenRLHF)."""
