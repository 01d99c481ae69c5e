"""``pluie-reward bench`` / ``python -m pluie_reward.tools.bench``: the benchmark's command line."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

from ..cli.common import add_judge_arguments, judge_from_args
from ..cli.main import main as cli_main
from ..cli.output import check_output_file, write_text_file
from ..cli.registry import command
from ..shared import UsageError, nonneg_int, positive_int
from .engines import compare_engines, comparison_json, format_engine_table, load_vllm_judge, parse_engines
from .group import compare_group_judging, format_group_table
from .grpo_share import PLACEMENTS as GRPO_PLACEMENTS, format_grpo_table, grpo_share
from .run import (
    DEFAULT_METHODS,
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
    agreement_lines,
)
from .server_load import check_load, format_server_table, server_load


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``pluie-reward bench``."""
    add_judge_arguments(parser)
    parser.add_argument("--data", type=Path, default=None, help=f"PARAPHRASUS {_DATA_NAME} (default: ../shared/data/paraphrasus/)")
    parser.add_argument("--template", default="para-fs", help="two-field paraphrase template (default para-fs)")
    parser.add_argument("--pairs", type=positive_int, default=64, help="pairs of the mrpc workload (default 64)")
    parser.add_argument("--sources", type=positive_int, default=8, help="sources of the grpo workload (default 8)")
    parser.add_argument("--per-source", type=positive_int, default=8, help="hypotheses per source in the grpo workload (default 8)")
    parser.add_argument("--workloads", default="mrpc,grpo", help="comma-separated: mrpc, grpo (default both)")
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                        help=f"comma-separated subset of {','.join(METHODS)} (default: all but indirect)")
    parser.add_argument("--indirect-template", default="para-indirect", help="the INDIRECT method's template (default para-indirect)")
    parser.add_argument("--indirect-max-new-tokens", type=positive_int, default=None,
                        help="length limit of the INDIRECT judge's own answer (default: the template's)")
    parser.add_argument("--rounds", type=positive_int, default=3, help="interleaved rounds; (3) runs once per round (default 3)")
    parser.add_argument("--sample-every", type=positive_int, default=2, help="(1) and (2) run on every k-th pair (default 2)")
    parser.add_argument("--generate-batch-size", type=positive_int, default=8, help="batch size of the LLM-Yes/No generate (default 8)")
    parser.add_argument("--placement", action="store_true", help="also measure judge placement memory in fresh processes")
    parser.add_argument("--json", type=Path, default=None, help="write all numbers to this JSON file")
    parser.add_argument("--threads", type=positive_int, default=None,
                        help="torch threads of this process (default: torch's; 1 is steadier on a loaded machine)")
    group = parser.add_argument_group("engines, server and training (off by default)")
    group.add_argument("--engines", default=None, metavar="LIST",
                       help="compare Judge.score on these engines side by side, e.g. transformers,vllm (pairs/s, ratio, max |diff|)")
    group.add_argument("--vllm-max-model-len", type=positive_int, default=4096,
                       help="context length of the benchmark's vLLM judges (default 4096)")
    group.add_argument("--server-clients", type=nonneg_int, default=0, metavar="N",
                       help="also load a judge server (pluie-reward serve, started here on 127.0.0.1) with N concurrent clients, "
                            "for each engine of --engines (default: transformers)")
    group.add_argument("--server-requests", type=positive_int, default=4, help="requests per client (default 4)")
    group.add_argument("--server-items", type=positive_int, default=8, help="distinct pairs per request (default 8)")
    group.add_argument("--grpo-steps", type=nonneg_int, default=0, metavar="N",
                       help="also time N steps of a small GRPOTrainer per judge placement (shared, separate, and vllm when "
                            "--engines has it), in fresh processes: the reward's share of the step")
    group.add_argument("--groups", type=nonneg_int, default=0, metavar="N",
                       help="also compare group-relative judging (para-group) with pointwise PLUIE on N GRPO-shaped groups")
    group.add_argument("--group-size", type=positive_int, default=4, help="candidates per group of --groups (2 to 16, default 4)")
    group.add_argument("--group-orders", default="1,2,4", help="numbers of cyclic orders to compare (default 1,2,4)")


def check_args(args: argparse.Namespace, pairs_available: int | None = None) -> tuple[list[str], list[str], list[str]]:
    """Workloads, methods and engines of the command line, checked before any model loads.

    Example:
        >>> import argparse
        >>> parser = argparse.ArgumentParser(); configure(parser)
        >>> check_args(parser.parse_args(["--engines", "transformers,vllm", "--methods", "score"]))
        (['mrpc', 'grpo'], ['score'], ['transformers', 'vllm'])
    """
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not names or set(names) - {"mrpc", "grpo"}:
        raise UsageError(f"--workloads: choose from ['mrpc', 'grpo'], got {args.workloads!r}.")
    if set(methods) - set(METHODS):
        raise UsageError(f"--methods: choose from {list(METHODS)}, got {args.methods!r}.")
    engines = parse_engines(args.engines)
    if not methods and not engines and not args.server_clients and not args.grpo_steps and not args.placement and not args.groups:
        raise UsageError("nothing to run: give --methods, --engines, --server-clients, --grpo-steps, --groups or --placement.")
    if not 2 <= args.group_size <= 16:
        raise UsageError(f"--group-size must be from 2 to 16, got {args.group_size}.")
    try:
        orders = [int(k) for k in args.group_orders.split(",") if k.strip()]
    except ValueError:
        raise UsageError(f"--group-orders: comma-separated whole numbers, got {args.group_orders!r}.") from None
    if not orders or not all(1 <= k <= args.group_size for k in orders):
        raise UsageError(f"--group-orders: each from 1 to --group-size ({args.group_size}), got {args.group_orders!r}.")
    if args.engine != "transformers":
        raise UsageError(f"--engine {args.engine}: the benchmark's methods read the transformers model; "
                         "compare engines with --engines transformers,vllm instead.")
    if engines and engines[0] != "transformers":
        raise UsageError("--engines: list transformers first (the other engines' scores are compared with it).")
    if args.server_clients:
        check_load(args.server_clients, args.server_requests, args.server_items,
                   pairs_available if pairs_available is not None else 10**9)
    if args.grpo_steps and (args.model is not None or args.adapter is not None):
        raise UsageError("--grpo-steps trains the embedded demo model with its own judges; drop --model/--adapter.")
    return names, methods, engines


@command("bench", configure)
def bench_command(args: argparse.Namespace) -> int:
    """Benchmark Judge.score against the seeds' two-pass method and an LLM-Yes/No generate judge,
    engines side by side, the judge server under load and the reward's share of GRPO steps."""
    check_args(args)
    check_output_file(args.json, "--json", inputs=[args.data])
    data = args.data or default_data_path()
    if data is None:
        raise UsageError(f"no {_DATA_NAME} found beside the checkout; pass --data PATH.")
    pairs = read_pairs(data)
    names, methods, engines = check_args(args, len(pairs))
    workloads = [mrpc_workload(pairs, args.pairs) if n == "mrpc" else grpo_workload(pairs, args.sources, args.per_source)
                 for n in names]
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    judge = judge_from_args(args)
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    say(f"pluie-reward bench: {machine_line(judge)}")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"# pluie-reward bench, {started}\n\n{machine_line(judge)}\n")
    payload: dict = {"started": started, "machine": machine_line(judge)}
    results = []
    if methods:
        results = [
            run_workload(judge, w, args.template, methods, args.rounds, args.sample_every, args.generate_batch_size, log=say,
                         indirect_template=args.indirect_template, indirect_max_new_tokens=args.indirect_max_new_tokens)
            for w in workloads
        ]
        for r in results:
            print(format_table(r) + "\n")
        lines = agreement_lines(results)
        if lines:
            print("Agreement of (3) with the seeds' method (1):\n" + "\n".join(lines) + "\n")
        payload["workloads"] = [
            {**{k: v for k, v in asdict(r).items() if k != "results"},
             "methods": {m: {**asdict(x), "pairs_per_second": x.pairs_per_second} for m, x in r.results.items()},
             "max_diff": r.max_diff(), "agreement": r.agreement()}
            for r in results
        ]
    if engines:
        judges = {"transformers": judge}
        try:
            if "vllm" in engines:
                say("loading the vLLM judge (about a minute on a CPU) ...")
                dtype = str(judge.model.dtype).replace("torch.", "")  # the same weights dtype on both engines
                judges["vllm"] = load_vllm_judge(args.model, dtype, max_model_len=args.vllm_max_model_len)
            comparisons = [compare_engines(judges, w, args.template, args.rounds, log=say) for w in workloads]
        finally:
            for name, other in judges.items():
                if name != "transformers":
                    other.close()
        print(format_engine_table(comparisons) + "\n")
        payload["engines"] = [comparison_json(c) for c in comparisons]
    if args.server_clients:
        loads = []
        for engine in engines or ["transformers"]:
            say(f"judge server on {engine}: starting it, then {args.server_clients} clients ...")
            loads.append(server_load(engine, pairs, args.server_clients, args.server_requests, args.server_items,
                                     template=args.template, model=args.model))
        print(format_server_table(loads) + "\n")
        payload["server"] = [{**asdict(x), "items_per_second": x.items_per_second, "p50": x.p50, "p99": x.p99} for x in loads]
    if args.grpo_steps:
        placements = [p for p in GRPO_PLACEMENTS if p != "vllm" or "vllm" in engines]
        say(f"GRPO steps: {', '.join(placements)}, each in a fresh process ...")
        rows = grpo_share(placements, args.grpo_steps, args.threads)
        print(format_grpo_table(rows) + "\n")
        payload["grpo"] = rows
    if args.groups:
        say(f"group-relative judging: {args.groups} groups of {args.group_size} ...")
        orders = [int(k) for k in args.group_orders.split(",") if k.strip()]
        compared = compare_group_judging(judge, pairs, groups=args.groups, size=args.group_size, orders=orders,
                                         pointwise_template=args.template)
        print(format_group_table(compared) + "\n")
        payload["groups"] = compared
    memory = None
    if args.placement:
        say("placement memory: three fresh processes ...")
        memory = placement_memory()
        print("Judge placement, peak memory of a fresh process (one LoRA policy step, then 16 pairs scored):\n")
        print(format_placements(memory) + "\n")
    payload["placement"] = memory
    if args.json:
        write_text_file(args.json, json.dumps(payload, indent=1, default=str), "--json")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pluie_reward.tools.bench [options]`` (same as ``pluie-reward bench``)."""
    return cli_main(["bench", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
