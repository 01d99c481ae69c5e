"""The benchmark: :meth:`Judge.score` beside the seeds' two-pass method and an output-based judge, in one run."""
