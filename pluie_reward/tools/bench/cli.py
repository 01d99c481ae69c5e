"""``pluie-reward bench`` / ``python -m pluie_reward.tools.bench``: the benchmark's command line."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

from ..cli.common import UsageError, add_judge_arguments, command, judge_from_args
from .run import (
    METHODS,
    _DATA_NAME,
    default_data_path,
    format_placements,
    format_table,
    grpo_workload,
    machine_line,
    mrpc_workload,
    placement_memory,
    read_pairs,
    run_workload,
    target_lines,
)


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``pluie-reward bench``."""
    add_judge_arguments(parser)
    parser.add_argument("--data", type=Path, default=None, help=f"PARAPHRASUS {_DATA_NAME} (default: ../shared/data/paraphrasus/)")
    parser.add_argument("--template", default="para-fs", help="two-field paraphrase template (default para-fs)")
    parser.add_argument("--pairs", type=int, default=64, help="pairs of the mrpc workload (default 64)")
    parser.add_argument("--sources", type=int, default=8, help="sources of the grpo workload (default 8)")
    parser.add_argument("--per-source", type=int, default=8, help="hypotheses per source in the grpo workload (default 8)")
    parser.add_argument("--workloads", default="mrpc,grpo", help="comma-separated: mrpc, grpo (default both)")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated subset of {','.join(METHODS)}")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; (3) runs once per round (default 3)")
    parser.add_argument("--sample-every", type=int, default=2, help="(1) and (2) run on every k-th pair (default 2)")
    parser.add_argument("--generate-batch-size", type=int, default=8, help="batch size of the LLM-Yes/No generate (default 8)")
    parser.add_argument("--placement", action="store_true", help="also measure judge placement memory in fresh processes")
    parser.add_argument("--json", type=Path, default=None, help="write all numbers to this JSON file")


@command("bench", configure)
def bench_command(args: argparse.Namespace) -> int:
    """Benchmark Judge.score against the seeds' two-pass method and an LLM-Yes/No generate judge."""
    data = args.data or default_data_path()
    if data is None:
        raise UsageError(f"no {_DATA_NAME} found beside the checkout; pass --data PATH.")
    pairs = read_pairs(data)
    builders = {
        "mrpc": lambda: mrpc_workload(pairs, args.pairs),
        "grpo": lambda: grpo_workload(pairs, args.sources, args.per_source),
    }
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not names or set(names) - set(builders):
        raise UsageError(f"--workloads: choose from {list(builders)}, got {args.workloads!r}.")
    if not methods or set(methods) - set(METHODS):
        raise UsageError(f"--methods: choose from {list(METHODS)}, got {args.methods!r}.")
    workloads = [builders[n]() for n in names]
    judge = judge_from_args(args)
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    say(f"pluie-reward bench: {machine_line(judge)}")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results = [
        run_workload(judge, w, args.template, methods, args.rounds, args.sample_every, args.generate_batch_size, log=say)
        for w in workloads
    ]
    print(f"# pluie-reward bench, {started}\n\n{machine_line(judge)}\n")
    for r in results:
        print(format_table(r) + "\n")
    lines = target_lines(results)
    if lines:
        print("Against the reference speed-ups (expected on the embedded judge, 2 CPU cores) and the agreement tolerance:\n"
              + "\n".join(lines) + "\n")
    memory = None
    if args.placement:
        say("placement memory: three fresh processes ...")
        memory = placement_memory()
        print("Judge placement, peak memory of a fresh process (one LoRA policy step, then 16 pairs scored):\n")
        print(format_placements(memory) + "\n")
    if args.json:
        payload = {
            "started": started,
            "machine": machine_line(judge),
            "workloads": [
                {**{k: v for k, v in asdict(r).items() if k != "results"},
                 "methods": {m: {**asdict(x), "pairs_per_second": x.pairs_per_second} for m, x in r.results.items()},
                 "max_diff": r.max_diff(), "agreement": r.agreement()}
                for r in results
            ],
            "placement": memory,
        }
        args.json.write_text(json.dumps(payload, indent=1, default=str), encoding="utf-8")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pluie_reward.tools.bench [options]`` (same as ``pluie-reward bench``)."""
    from ..cli.main import main as cli_main

    return cli_main(["bench", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
