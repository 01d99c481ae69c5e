"""Time the documented smoke runs with the default thread setting against ``--threads N``, alternated on one machine.

Each round runs every setting once, in turn, as a fresh process (so load from other work hits them alike), and
records its wall time and the 1-minute load average before it started; the report gives each setting's median and
its ratio to the best. ``--spinning`` adds what the examples did before
:func:`~pluie_reward.common.threads.fit_threads`: torch's own thread count (one per CPU), waiting threads spinning
(``OMP_WAIT_POLICY=ACTIVE``). A goal of issue 63: the defaults within 1.2x of the best setting on a loaded machine
(load >= 2 from other work), and no slower on an idle one.

    python scripts/threads_ab.py --rounds 2                      # both smoke runs, defaults against --threads 1 and 2
    python scripts/threads_ab.py --runs grpo --threads 1 --spinning --json out/threads.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = {  # the smoke runs docs/rewards.md and docs/evaluation.md print
    "grpo": ["examples/grpo_paraphrase.py", "--max-steps", "2", "--max-held-out", "1"],
    "distill": ["examples/distill_paraphraser.py", "--rounds", "1", "--n", "2", "--sentences", "4", "--max-held-out", "2",
                "--epochs", "1"],
}


def settings(threads: list[int], spinning: bool) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Setting name -> (extra arguments, environment changes)."""
    out = {"default": ([], {})}
    out.update({f"--threads {n}": (["--threads", str(n)], {}) for n in threads})
    if spinning:
        cpus = str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
        out[f"before fit_threads ({cpus} spinning threads)"] = ([], {"OMP_WAIT_POLICY": "ACTIVE", "OMP_NUM_THREADS": cpus})
    return out


def run_once(run: str, extra: list[str], env_changes: dict[str, str], folder: Path) -> dict[str, float]:
    """One fresh run in ``folder``: its wall seconds and the load average before it."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update(env_changes)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    load = os.getloadavg()[0]
    start = time.monotonic()
    done = subprocess.run([sys.executable, str(ROOT / RUNS[run][0]), *RUNS[run][1:], *extra, "--output-dir", str(folder)],
                          capture_output=True, text=True, env=env, cwd=folder)
    if done.returncode != 0:
        raise RuntimeError(f"{run} {' '.join(extra)} failed:\n{done.stderr[-3000:]}")
    return {"seconds": time.monotonic() - start, "load": load}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="grpo,distill", help="comma-separated: grpo, distill (default both)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="--threads values to compare (default 1 2)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--spinning", action="store_true", help="also what the examples did before fit_threads: a spinning thread per CPU")
    parser.add_argument("--json", type=Path, default=None, help="also write every timing here")
    args = parser.parse_args(argv)
    runs = [r for r in args.runs.split(",") if r]
    if not runs or set(runs) - set(RUNS) or args.rounds < 1:
        parser.error(f"--runs: a comma-separated subset of {', '.join(RUNS)}; --rounds at least 1.")
    chosen = settings(args.threads, args.spinning)
    times: dict[str, dict[str, list[dict[str, float]]]] = {run: {name: [] for name in chosen} for run in runs}
    with tempfile.TemporaryDirectory(prefix="threads-ab-") as tmp:
        for round_ in range(1, args.rounds + 1):
            for run in runs:
                for index, (name, (extra, env)) in enumerate(chosen.items()):
                    folder = Path(tmp) / f"{run}-{round_}-{index}"
                    folder.mkdir()
                    times[run][name].append(run_once(run, extra, env, folder))
                    got = times[run][name][-1]
                    print(f"round {round_}, {run}, {name}: {got['seconds']:.0f} s (load {got['load']:.1f})", file=sys.stderr, flush=True)
    print(f"{os.cpu_count()} CPUs; {args.rounds} alternated round(s); seconds per run, median (min-max), ratio to the best median\n")
    print("| run | setting | seconds | ratio to best | load before (min-max) |\n|---|---|---:|---:|---:|")
    for run in runs:
        medians = {name: statistics.median(t["seconds"] for t in got) for name, got in times[run].items()}
        best = min(medians.values())
        for name, got in times[run].items():
            seconds, loads = [t["seconds"] for t in got], [t["load"] for t in got]
            print(f"| {run} | {name} | {medians[name]:.0f} ({min(seconds):.0f}-{max(seconds):.0f}) | {medians[name] / best:.2f} | "
                  f"{min(loads):.1f}-{max(loads):.1f} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(times, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
