"""``pluie-reward bench <section>``: one sub-command per benchmark (:data:`SECTIONS`), each thin glue over the module
that owns it and :mod:`~pluie_reward.tools.bench.measure`. Each prints Markdown tables on stdout, its progress on
stderr, and with ``--json FILE`` its numbers.

Example (shell):
    pluie-reward bench methods --workloads mrpc --methods reference,score --rounds 2
    pluie-reward bench engines --engines transformers,vllm --json engines.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from contextlib import ExitStack, closing
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from ...judges import default_adapter_dir
from ..cli.common import add_judge_arguments, judge_from_args
from ..cli.output import check_output_file, write_text_file
from ..cli.registry import command
from ..shared import UsageError, comma_list, positive_int
from . import generative, gpu
from .engines import ENGINES, compare_engines, comparison_json, format_engine_table, load_vllm_judge
from .grpo_share import PLACEMENTS as GRPO_PLACEMENTS, format_grpo_table, grpo_share
from .run import (DEFAULT_METHODS, METHODS, _DATA_NAME, agreement_lines, builtin_pairs, default_data_path, format_table,
                  grpo_workload, machine_line, mrpc_workload, read_pairs, run_workload)
from .measure import load_average
from .server_load import add_load_arguments, check_load, format_server_table, server_load


# what the sections share ---------------------------------------------------------------------------
def say(text: str) -> None:
    """One progress line on stderr (stdout holds the report)."""
    print(text, file=sys.stderr, flush=True)


def _output(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", type=Path, default=None, help="also write the numbers to this JSON file")


def _data(p: argparse.ArgumentParser, judge: bool = True) -> None:
    """The data options, and with ``judge`` the judge this process loads and its threads."""
    if judge:
        add_judge_arguments(p)
        p.add_argument("--threads", type=positive_int, default=None,
                       help="torch threads of this process (default: torch's; 1 is steadier on a loaded machine)")
    p.add_argument("--data", type=Path, default=None, help=f"PARAPHRASUS {_DATA_NAME} (default: in $PARAPHRASUS_DIR or "
                   "../shared/data/paraphrasus/, else the package's 120 built-in pairs)")
    p.add_argument("--template", default="para-fs", help="two-field paraphrase template (default para-fs)")
    _output(p)


def _workloads(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workloads", type=comma_list(["mrpc", "grpo"], unique=True), default="mrpc,grpo",
                   help="comma-separated: mrpc, grpo (default both)")
    p.add_argument("--pairs", type=positive_int, default=64, help="pairs of the mrpc workload (default 64)")
    p.add_argument("--sources", type=positive_int, default=8, help="sources of the grpo workload (default 8)")
    p.add_argument("--per-source", type=positive_int, default=8, help="hypotheses per source in the grpo workload (default 8)")
    p.add_argument("--rounds", type=positive_int, default=3, help="interleaved rounds (default 3)")


def _pairs(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The benchmark's pairs, after the options' checks and before anything loads."""
    check_output_file(args.json, "--json", inputs=[args.data])
    data = args.data or default_data_path()
    args.pairs_label = "MRPC" if data is not None else "built-in"
    if data is None:
        say(f"no {_DATA_NAME} given or found: the package's 120 built-in pairs (the default judge's held-out set). For "
            f"PARAPHRASUS' MRPC pairs, which BENCHMARKS.md reports, pass --data DIR/{_DATA_NAME} or set PARAPHRASUS_DIR "
            "(the JSON files of https://github.com/impresso/paraphrasus, folder datasets_no_results; docs/evaluation.md)")
        return builtin_pairs()
    return read_pairs(data)


def _transformers_only(args: argparse.Namespace, why: str) -> None:
    if args.engine != "transformers":
        raise UsageError(f"--engine {args.engine}: {why}; compare engines with `pluie-reward bench engines` instead.")


def _judge(args: argparse.Namespace, section: str) -> tuple[Any, dict[str, Any]]:
    """This process's judge (on ``--threads`` torch threads), and the report's header with its machine line."""
    if args.threads is not None:
        import torch  # lazy: CLI start-up

        torch.set_num_threads(args.threads)
    judge = judge_from_args(args)
    return judge, _header(section, machine_line(judge))


def _header(section: str, machine: str) -> dict[str, Any]:
    """Print the report's header (and its machine line on stderr); the ``--json`` payload so far."""
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    say(f"pluie-reward bench {section}: {machine}")
    print(f"# pluie-reward bench {section}, {started}\n\n{machine}\n")
    return {"section": section, "started": started, "machine": machine}


def _report(args: argparse.Namespace, payload: dict[str, Any], key: str, value: Any, tables: str) -> int:
    """Print the section's tables, then write ``payload`` with ``value`` under ``key`` to ``--json``, whole (the one
    writer of the sections' JSON)."""
    print(tables + "\n")
    if args.json:
        write_text_file(args.json, json.dumps({**payload, key: value}, indent=1, default=str), "--json")
    return 0


def _machine() -> str:
    """The machine line of the sections that load no judge here."""
    return f"{os.cpu_count()} CPUs; load average {load_average()}"


def _workload_list(args: argparse.Namespace) -> list[Any]:
    pairs = _pairs(args)
    return [mrpc_workload(pairs, args.pairs, args.pairs_label) if n == "mrpc" else grpo_workload(pairs, args.sources, args.per_source)
            for n in args.workloads]


# methods --------------------------------------------------------------------------------------------
def _methods_args(p: argparse.ArgumentParser) -> None:
    _data(p)
    _workloads(p)
    p.add_argument("--methods", type=comma_list(METHODS, unique=True), default=",".join(DEFAULT_METHODS),
                   help=f"comma-separated subset of {','.join(METHODS)} (default: all but indirect)")
    p.add_argument("--indirect-template", default="para-indirect", help="the INDIRECT method's template (default para-indirect)")
    p.add_argument("--indirect-max-new-tokens", type=positive_int, default=None,
                   help="length limit of the INDIRECT judge's own answer (default: the template's)")
    p.add_argument("--sample-every", type=positive_int, default=2, help="(1) and (2) run on every k-th pair (default 2)")
    p.add_argument("--generate-batch-size", type=positive_int, default=8, help="batch size of the LLM-Yes/No generate (default 8)")


def _methods(args: argparse.Namespace) -> int:
    _transformers_only(args, "the methods read the transformers model")
    workloads = _workload_list(args)
    judge, payload = _judge(args, "methods")
    results = [run_workload(judge, w, args.template, args.methods, args.rounds, args.sample_every, args.generate_batch_size,
                            log=say, indirect_template=args.indirect_template,
                            indirect_max_new_tokens=args.indirect_max_new_tokens) for w in workloads]
    lines = agreement_lines(results)
    tables = "\n\n".join(format_table(r) for r in results)
    if lines:
        tables += "\n\nAgreement of (3) with the seeds' method (1):\n" + "\n".join(lines)
    return _report(args, payload, "workloads", [
        {**{k: v for k, v in asdict(r).items() if k != "results"},
         "methods": {m: {**asdict(x), "pairs_per_second": x.pairs_per_second} for m, x in r.results.items()},
         "max_diff": r.max_diff(), "agreement": r.agreement()} for r in results], tables)


# engines --------------------------------------------------------------------------------------------
def _engines_args(p: argparse.ArgumentParser) -> None:
    _data(p)
    _workloads(p)
    p.add_argument("--engines", type=comma_list(ENGINES, unique=True), default="transformers,vllm", metavar="LIST",
                   help="engines compared, transformers first (default transformers,vllm): pairs/s, ratio, max |diff|")
    p.add_argument("--vllm-max-model-len", type=positive_int, default=4096,
                   help="context length of the benchmark's vLLM judges (default 4096)")


def _engines(args: argparse.Namespace) -> int:
    _transformers_only(args, "the other engines' scores are compared with the transformers judge's")
    if args.engines[0] != "transformers":
        raise UsageError("--engines: list transformers first (the other engines' scores are compared with it).")
    workloads = _workload_list(args)
    judge, payload = _judge(args, "engines")
    judges = {"transformers": judge}
    with ExitStack() as others:  # the other engines' judges are closed here, the comparison done or failed
        if "vllm" in args.engines:
            say("loading the vLLM judge (about a minute on a CPU) ...")
            dtype = str(judge.model.dtype).replace("torch.", "")  # the same weights dtype on both engines
            judges["vllm"] = others.enter_context(closing(load_vllm_judge(args.model, dtype, max_model_len=args.vllm_max_model_len)))
        comparisons = [compare_engines(judges, w, args.template, args.rounds, log=say) for w in workloads]
    return _report(args, payload, "engines", [comparison_json(c) for c in comparisons], format_engine_table(comparisons))


# generative -----------------------------------------------------------------------------------------
def _generative_args(p: argparse.ArgumentParser) -> None:
    _data(p)
    _workloads(p)
    p.add_argument("--vllm-max-model-len", type=positive_int, default=4096,
                   help="context length of the vLLM server and judge (default 4096); a pitfall's prompt exceeds it")


def _generative(args: argparse.Namespace) -> int:
    _transformers_only(args, "the paths are compared with the transformers judge's scores")
    if args.adapter or importlib.util.find_spec("vllm") is None:
        raise UsageError("bench generative serves --model on vLLM (no --adapter) and needs vLLM: see docs/vllm.md, Install.")
    workloads = _workload_list(args)
    from ...engines.transformers.loading import model_source  # lazy: CLI start-up (torch)

    judge, payload = _judge(args, "generative")
    model = str(model_source(args.model, default_adapter=default_adapter_dir()))
    result = generative.run(judge, model, workloads, args.template, args.rounds, args.vllm_max_model_len, say)
    return _report(args, payload, "generative", result, generative.format_tables(result))


# server ---------------------------------------------------------------------------------------------
def _server_args(p: argparse.ArgumentParser) -> None:
    add_load_arguments(p, clients=4, requests=4)
    _data(p, judge=False)
    p.add_argument("--engines", type=comma_list(ENGINES, unique=True), default="transformers", metavar="LIST",
                   help="one server per engine, in turn (default transformers)")


def _server(args: argparse.Namespace) -> int:
    check_load(args.clients, args.requests, args.items, 10**9)  # the load checked before and after the data is read
    pairs = _pairs(args)
    check_load(args.clients, args.requests, args.items, len(pairs))
    payload = _header("server", _machine())
    loads = []
    for engine in args.engines:
        say(f"judge server on {engine}: starting it, then {args.clients} clients ...")
        loads.append(server_load(engine, pairs, args.clients, args.requests, args.items, template=args.template, model=args.model))
    return _report(args, payload, "server", [x.as_json() for x in loads], format_server_table(loads))


# grpo -----------------------------------------------------------------------------------------------
def _grpo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=positive_int, default=2, help="GRPO steps per placement (default 2)")
    p.add_argument("--placements", type=comma_list(GRPO_PLACEMENTS, unique=True), default="shared,separate", metavar="LIST",
                   help=f"judge placements, each in a fresh process: {','.join(GRPO_PLACEMENTS)} (default shared,separate)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads of each training process")
    _output(p)


def _grpo(args: argparse.Namespace) -> int:
    check_output_file(args.json, "--json")
    payload = _header("grpo", _machine())
    say(f"GRPO steps: {', '.join(args.placements)}, each in a fresh process ...")
    rows = grpo_share(args.placements, args.steps, args.threads)
    return _report(args, payload, "grpo", rows, format_grpo_table(rows))


# the command ----------------------------------------------------------------------------------------
SECTIONS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {
    "methods": ("Judge.score beside the seeds' two-pass method and an LLM-Yes/No generate judge", _methods_args, _methods),
    "engines": ("Judge.score on several engines side by side", _engines_args, _engines),
    "generative": ("Judge.score beside vLLM's own /generative_scoring (needs vLLM)", _generative_args, _generative),
    "server": ("the judge server (pluie-reward serve, started here) under concurrent clients", _server_args, _server),
    "grpo": ("the reward's share of GRPO steps and peak memory per judge placement, in fresh processes", _grpo_args, _grpo),
    "gpu": ("the CUDA path against its goals (one prepared run on a lent GPU)", gpu.add_cli_args, gpu.run_args),
}


def configure(parser: argparse.ArgumentParser) -> None:
    """The sections of ``pluie-reward bench``, one sub-command each."""
    sections = parser.add_subparsers(dest="section", required=True, metavar="{" + ",".join(SECTIONS) + "}")
    for name, (summary, arguments, run) in SECTIONS.items():
        section = sections.add_parser(name, help=summary, description=summary)
        arguments(section)
        section.set_defaults(bench_run=run)


@command("bench", configure)
def bench_command(args: argparse.Namespace) -> int:
    """Benchmarks, one section each: methods, engines, generative, server, grpo, gpu."""
    return args.bench_run(args)
