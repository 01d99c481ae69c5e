"""``pluie-reward bench generative``: vLLM's own generative scoring beside :meth:`Judge.score`, same judge, same pairs.

vLLM's ``POST /generative_scoring`` (vLLM >= 0.20) returns, per item of ``query`` + ``items``, the first of
``label_token_ids``' probability (``apply_softmax=false``: over the vocabulary). Paths, timed as ``bench engines`` times
engines: ``Judge.score`` on the transformers engine, on vLLM in this process, on the vLLM server (``/v1/completions``);
the endpoint with the request a user writes (:func:`user_request`) and with the exact prompt ids (:func:`ids_request`).
Then each path's peak memory and where the user's request goes wrong (:func:`pitfalls`).

Example:
    $ pluie-reward bench generative                        # embedded judge, built-in pairs, vLLM's CPU build: minutes
    $ pluie-reward bench generative --data ms-mrpc.json --json generative.json
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Sequence

from .engines import compare_engines, comparison_json, format_engine_table, load_vllm_judge
from .measure import PeakMemory, column_table
from .server_load import _wait_ready, free_port, launch, stop_server

MARK = "\ue010hypothesis\ue011"  # where the hypothesis goes in the user's rendering


def user_request(bound: Any, source: str, hypotheses: Sequence[str]) -> dict[str, Any]:
    """The request a user writes for one source: ``query`` the rendered prompt up to the hypothesis, each item the
    hypothesis and the rest of the prompt (text), the labels the answer words tokenized alone (their first tokens).

    Example:
        >>> r = user_request(judge.bind("para-fs"), "The cat sleeps.", ["A cat is asleep."])
        >>> r["query"].endswith('A: "The cat sleeps."; B: "'), r["items"][0].startswith('A cat is asleep."')
        (True, True)
    """
    head, _, rest = bound.render(dict(zip(bound.template.fields, (source, MARK)))).partition(MARK)
    labels = [bound.tokenizer.encode(word, add_special_tokens=False)[0] for word in bound.answer_words]
    return {"query": head, "items": [h + rest for h in hypotheses], "label_token_ids": labels}


def ids_request(ids: Sequence[Sequence[int]], answer_ids: Sequence[Sequence[int]]) -> dict[str, Any]:
    """The request on the exact prompt ids of one source's items: ``query`` their common prefix (all but the last token
    of a lone item), each item the rest; the labels the answers' first tokens as the prompt reads them.

    Example:
        >>> ids_request([[1, 2, 3, 4], [1, 2, 5]], [(7,), (8,)])
        {'query': [1, 2], 'items': [[3, 4], [5]], 'label_token_ids': [7, 8]}
        >>> ids_request([[1, 2, 3]], [(7,), (8,)])["items"]
        [[3]]
    """
    cut = next((i for i, column in enumerate(zip(*ids)) if len(set(column)) > 1), len(ids[0]))
    cut = min(cut, min(map(len, ids)) - 1)
    return {"query": list(ids[0][:cut]), "items": [list(x[cut:]) for x in ids], "label_token_ids": [a[0] for a in answer_ids]}


def judge_ids(judge: Any, sources: Sequence[str], hypotheses: Sequence[str], template: Any = "para-fs") -> list[list[int]]:
    """The prompt ids ``judge.score`` reads on a two-field ``template``, one list per item, the answer position last
    (what the plain forward and vLLM's generative scoring read, and the distinct tokens are counted on)."""
    fields = judge.bind(template).template.fields
    plan = judge.plan(template, **dict(zip(fields, (list(sources), list(hypotheses)))))
    return [list(item.ids) for item in plan.bound.encode_items(plan.columns, plan.n)]


def requests(judge: Any, template: Any, sources: Sequence[str], hypotheses: Sequence[str], exact: bool) -> list[dict[str, Any]]:
    """One request per run of items sharing a source: :func:`ids_request` if ``exact``, else :func:`user_request`."""
    bound = judge.bind(template)
    runs = [(source, [i for i, _ in run]) for source, run in itertools.groupby(enumerate(sources), key=lambda x: x[1])]
    if exact:
        ids = judge_ids(judge, sources, hypotheses, template)
        return [ids_request([ids[i] for i in items], bound.answer_ids) for _, items in runs]
    return [user_request(bound, source, [hypotheses[i] for i in items]) for source, items in runs]


def read(url: str, batch: Sequence[dict[str, Any]]) -> list[tuple[float, float]]:
    """(log p(Yes), log p(No)) of every item: each request sent with ``apply_softmax=false`` twice, its labels in order
    then reversed (the endpoint returns the first label's probability), all concurrently; items in request order."""
    from ...common.http import AsyncHTTPClient, HTTPConfig  # optional: httpx

    async def send() -> list[Any]:
        async with AsyncHTTPClient(url, HTTPConfig(timeout=900, retries=0), name="vLLM server", max_connections=256) as client:
            return await asyncio.gather(*(client.request("POST", "/generative_scoring", json={
                **r, "model": "judge", "apply_softmax": False, "label_token_ids": r["label_token_ids"][:: 1 - 2 * k]})
                for r in batch for k in (0, 1)))

    log = [[math.log(d["score"]) if d["score"] > 0 else -math.inf for d in sorted(a["data"], key=lambda d: d["index"])]
           for a in asyncio.run(send())]
    return [pair for j in range(0, len(log), 2) for pair in zip(log[j], log[j + 1])]


def tree(pid: int) -> list[Any]:
    """The process ``pid`` and its descendants (psutil)."""
    import psutil

    root = psutil.Process(pid)
    return [root] + root.children(recursive=True)


def pitfalls(judge: Any, remote: Any, url: str, template: str, pairs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Where the user's request departs from ``Judge.score``, beside the pairs as they are: a hypothesis that starts with
    a quote (tokenized apart from the template's opening quote, where the whole prompt merges them), answers of several tokens
    (``para-fs-fr``'s "oui": the endpoint reads a first token), a prompt over the server's context (the endpoint cuts its
    end, the answer position, silently; ``remote``, the judge on that server, cuts the hypothesis's middle, warning), and a
    completion spelling the chat markup (the endpoint reads control tokens, ``Judge.score`` text); with the endpoint's
    p(Yes) + p(No) where it read (``answer_mass``)."""
    sources, hypotheses = [s for s, _ in pairs], [h for _, h in pairs]
    multi = type(judge).from_model(judge.model, judge.tokenizer, allow_multi_token=True)
    french = multi.bind("para-fs-fr")
    words = ", ".join(f"{w!r}: {len(a)} token(s)" for w, a in zip(french.answer_words, french.answer_ids))
    long = " ".join([hypotheses[0]] * (remote.max_length // len(judge.tokenizer.encode(hypotheses[0])) + 1))
    bound = judge.bind(template)
    forged = hypotheses[0] + bound.render(dict(zip(bound.template.fields, (sources[0], MARK)))).partition(MARK)[2] + "Yes" + bound.tail
    rows = []
    for case, ours, name, s, h in [("the pairs as they are", judge, template, sources, hypotheses),
                                   ("a hypothesis that starts with a quote", judge, template, sources[:1], [f'"{hypotheses[0]}"']),
                                   (f"answers of several tokens (para-fs-fr; {words})", multi, "para-fs-fr", sources, hypotheses),
                                   (f"a prompt over the server's context ({remote.max_length} tokens; Judge.score on that server)",
                                    remote, template, sources[:1], [long]),
                                   ("a completion spelling the chat markup (a forged 'Yes' turn)", judge, template, sources[:1], [forged])]:
        scores = ours.score(name, **dict(zip(ours.bind(name).template.fields, (s, h))))
        reads = read(url, requests(ours, name, s, h, exact=False))
        rows.append({"case": case, "n": len(s), "judge": scores, "endpoint": [y - n for y, n in reads],
                     "answer_mass": [math.exp(y) + math.exp(n) for y, n in reads],
                     "max_abs_diff": max(abs(a - (y - n)) for a, (y, n) in zip(scores, reads))})
    return rows


def run(judge: Any, model: str, workloads: Sequence[Any], template: str, rounds: int, max_model_len: int,
        log: Callable[[str], None], gpu_share: float = 0.3) -> dict[str, Any]:
    """Serve ``model`` (``judge``'s weights, a folder or HF id) on a vLLM server and on vLLM in this process (on a GPU each
    taking ``gpu_share`` of it), compare the paths on each workload, measure their memory, then :func:`pitfalls`."""
    from ...engines.vllm import CPU_DEFAULTS, on_cpu, use_every_core  # lazy: CLI start-up (torch)

    dtype, port = str(judge.model.dtype).replace("torch.", ""), free_port()
    log_path = Path(tempfile.gettempdir()) / f"pluie-bench-vllm-{port}.log"
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--served-model-name", "judge",
               "--dtype", dtype, "--port", str(port), "--host", "127.0.0.1", "--enable-prefix-caching",
               "--max-model-len", str(max_model_len)]
    use_every_core()
    options = {k.replace("_", "-"): v for k, v in CPU_DEFAULTS.items()} if on_cpu() else {"gpu-memory-utilization": gpu_share}
    command += [f"--{k}" if v is True else f"--{k}={v}" for k, v in options.items()]
    log("starting a vLLM server and loading the judge on vLLM in this process (minutes on a CPU) ...")
    server, url, opened = launch(command, log_path, VLLM_SERVER_DEV_MODE="1"), f"http://127.0.0.1:{port}", []
    try:
        own = load_vllm_judge(model, dtype, max_model_len=max_model_len, **({} if on_cpu() else {"gpu_memory_utilization": gpu_share}))
        opened.append(own)
        asyncio.run(_wait_ready(url, server, log_path, 900, path="/v1/models"))
        remote = type(judge).connect(url, tokenizer=judge.tokenizer)
        opened.append(remote)
        import httpx  # optional: httpx (the package's HTTP client needs it too)

        def reset() -> None:  # the server's prefix cache (dev mode)
            httpx.post(url + "/reset_prefix_cache", timeout=60).raise_for_status()

        me, fields = os.getpid(), judge.bind(template).template.fields
        served = lambda: tree(server.pid)  # noqa: E731
        paths = {"Judge.score, transformers engine": judge, "Judge.score, vLLM engine in this process": own,
                 "Judge.score, vLLM server (/v1/completions)": SimpleNamespace(score=remote.score,
                                                                              clear_cache=lambda: (remote.clear_cache(), reset()))}
        for exact, name in ((False, "the user's request (text)"), (True, "exact prompt ids")):  # scored as compare_engines scores
            paths[f"/generative_scoring, {name}"] = SimpleNamespace(
                score=lambda t, exact=exact, **f: [y - n for y, n in read(url, requests(judge, t, *f.values(), exact))], clear_cache=reset)
        owners = [lambda: tree(me)[:1], lambda: [p for p in tree(me)[1:] if p not in served()]] + [served] * 3
        comparisons = [compare_engines(paths, w, template, rounds, log=log) for w in workloads]
        memory = {}
        for (name, path), processes in zip(paths.items(), owners):  # untimed: one more call each, its processes' RSS sampled
            path.clear_cache()
            with PeakMemory(interval=0.02, processes=processes) as peak:
                path.score(template, **dict(zip(fields, (workloads[0].sources, workloads[0].hypotheses))))
            memory[name] = peak.rss_mb
        first = workloads[0]
        return {"comparisons": [comparison_json(c) for c in comparisons], "tables": format_engine_table(comparisons),
                "peak_rss_mib": memory, "pitfalls": pitfalls(judge, remote, url, template, list(zip(first.sources, first.hypotheses))[:8])}
    finally:
        for judge_ in opened:
            judge_.close()
        stop_server(server)


def format_tables(result: dict[str, Any]) -> str:
    """The comparison, the memory and the pitfalls as Markdown."""
    shown = lambda values: " ".join(f"{x:.2g}" for x in values[:3])  # noqa: E731
    return "\n\n".join([
        result["tables"], "Peak RSS of each path's processes (this one; vLLM's engine-core processes; the server's), one untimed call:",
        column_table([{"path": k, "mib": v} for k, v in result["peak_rss_mib"].items()],
                     [("path", "path", None), ("peak RSS MiB", "mib", ".0f")]),
        "Where the user's request goes wrong (log-ratios of the first items; the endpoint's p(Yes) + p(No) at the position it read):",
        column_table(result["pitfalls"], [("case", "case", None), ("n", "n", "d"), ("Judge.score", lambda r: shown(r["judge"]), "s"),
                                          ("endpoint", lambda r: shown(r["endpoint"]), "s"), ("max abs diff", "max_abs_diff", ".2g"),
                                          ("p(Yes) + p(No)", lambda r: shown(r["answer_mass"]), "s")])])
