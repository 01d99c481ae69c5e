"""Reading a training run back as one figure (:func:`read_run`, :func:`plot_run`; ``pluie-reward plot-run DIR``).

A run directory is a Trainer ``output_dir``: ``trainer_state.json`` at its top (``trainer.save_state()``) or in its
latest ``checkpoint-*`` folder, and the tables ``pluie/step-*.jsonl`` that :class:`~pluie_reward.PluieCallback` writes.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ...common.errors import library
from ..shared import json_lines

_REWARD = re.compile(r"^rewards/(.+)/mean$")
_TABLE = re.compile(r"^step-(\d+)\.jsonl$")


def _columns(points: list[tuple[int, float]]) -> tuple[list[int], list[float]]:
    """``(steps, values)`` of ``(step, value)`` points."""
    return [p[0] for p in points], [p[1] for p in points]


@dataclass
class RunLog:
    """What a run directory holds.

    Attributes:
        directory: the run's ``output_dir``.
        history: ``trainer_state.json``'s ``log_history`` (one dict per log call, with ``step``).
        tables: evaluation step -> the records of ``pluie/step-XXXXXX.jsonl`` (``score``, ``verdict`` ...).
        state_file: the ``trainer_state.json`` read, if any.
    """

    directory: Path
    history: list[dict[str, Any]] = field(default_factory=list)
    tables: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    state_file: Path | None = None

    def series(self, key: str) -> tuple[list[int], list[float]]:
        """Steps and finite values of one logged key, in step order.

        Example:
            >>> RunLog(Path("."), [{"step": 1, "reward": 0.5}, {"step": 2, "loss": 1.0}, {"step": 2, "reward": 0.7}]).series("reward")
            ([1, 2], [0.5, 0.7])
        """
        return _columns(sorted(((int(entry.get("step", 0)), float(entry[key])) for entry in self.history
                                if isinstance(entry.get(key), (int, float)) and math.isfinite(float(entry[key]))),
                               key=lambda p: p[0]))

    def table_means(self) -> tuple[list[int], list[float]]:
        """Steps and mean ``score`` of the ``pluie/`` tables (e.g. an evaluation made before
        ``train()``, which the trainer's state does not keep).

        Example:
            >>> RunLog(Path("."), tables={0: [{"score": -1.0}, {"score": 0.0}], 2: [{"score": 1.0}]}).table_means()
            ([0, 2], [-0.5, 1.0])
        """
        means = {step: [float(r["score"]) for r in rows if isinstance(r.get("score"), (int, float))]
                 for step, rows in sorted(self.tables.items())}
        return _columns([(step, sum(scores) / len(scores)) for step, scores in means.items() if scores])

    def keys(self) -> list[str]:
        """Every numeric key logged at least once, in first-seen order."""
        return list(dict.fromkeys(key for entry in self.history for key, value in entry.items()
                                  if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool)))

    def reward_names(self) -> list[str]:
        """Names of the reward functions TRL logged (``rewards/<name>/mean``)."""
        return [m.group(1) for key in self.keys() if (m := _REWARD.match(key))]


def _state_file(directory: Path) -> Path | None:
    top = directory / "trainer_state.json"
    if top.is_file():
        return top
    states = [p for p in directory.glob("checkpoint-*/trainer_state.json") if p.parent.name.split("-")[-1].isdigit()]
    return max(states, key=lambda p: int(p.parent.name.split("-")[-1]), default=None)  # the latest checkpoint


def read_run(directory: str | Path) -> RunLog:
    """Read a run directory (see the module docstring); ``FileNotFoundError`` when it holds neither a
    ``trainer_state.json`` nor PLUIE tables.

    Example:
        >>> for step in (0, 10, 20):  # the tables a PluieCallback wrote at three evaluations
        ...     table = Path("runs/sft_validation/pluie", f"step-{step:06d}.jsonl")
        ...     table.parent.mkdir(parents=True, exist_ok=True)
        ...     _ = table.write_text('{"score": 1.5, "verdict": true}\\n')
        >>> read_run("runs/sft_validation").tables.keys()
        dict_keys([0, 10, 20])
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory} is not a directory; give a Trainer output_dir.")
    run = RunLog(directory)
    run.state_file = _state_file(directory)
    if run.state_file is not None:
        run.history = list(json.loads(run.state_file.read_text(encoding="utf-8")).get("log_history", []))
    for path in sorted((directory / "pluie").glob("step-*.jsonl")):
        if match := _TABLE.match(path.name):
            rows = [json.loads(line) for line, _ in json_lines(path.read_text(encoding="utf-8")) if line.strip()]
            run.tables[int(match.group(1))] = rows
    if run.state_file is None and not run.tables:
        raise FileNotFoundError(
            f"{directory} has no trainer_state.json (top level or checkpoint-*/) and no pluie/step-*.jsonl tables; "
            "call trainer.save_state() after training, or save checkpoints."
        )
    return run


def rolling_mean(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over at most ``window`` values (the first points average what exists so far).

    Example:
        >>> rolling_mean([1.0, 2.0, 3.0, 4.0], 2)
        [1.0, 1.5, 2.5, 3.5]
    """
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def summary(run: RunLog) -> list[str]:
    """One line per curve: mean of the first and the last tenth of the steps (at least one point each).

    Example:
        >>> summary(RunLog(Path("."), [{"step": s, "reward": float(s)} for s in range(1, 11)]))
        ['reward: 1.000 -> 10.000 (mean of steps 1-1 vs 10-10, 10 points)']
    """
    lines = []
    keys = ["reward"] + [f"rewards/{n}/mean" for n in run.reward_names()]
    keys += [k for k in run.keys() if k.endswith("accept_rate") or k == "eval_pluie_mean"]
    for key in dict.fromkeys(keys):
        steps, values = run.series(key)
        if not values:
            continue
        k = max(1, len(values) // 10)
        first, last = sum(values[:k]) / k, sum(values[-k:]) / k
        lines.append(
            f"{key}: {first:.3f} -> {last:.3f} (mean of steps {steps[0]}-{steps[k - 1]} vs {steps[-k]}-{steps[-1]}, {len(values)} points)"
        )
    steps, means = run.table_means()
    if means:
        lines.append(f"pluie tables (mean score): step {steps[0]} {means[0]:.3f} -> step {steps[-1]} {means[-1]:.3f} ({len(means)} tables)")
    return lines


def _line(ax: Any, steps: list[int], values: list[float], label: str, color: str, window: int) -> None:
    if len(values) > 2 * window > 2:
        ax.plot(steps, values, color=color, alpha=0.3, linewidth=1)
        ax.plot(steps, rolling_mean(values, window), color=color, linewidth=2, label=f"{label} (mean of last {window})")
    else:
        ax.plot(steps, values, color=color, linewidth=2, marker="o" if len(values) < 30 else None, markersize=3, label=label)


def plot_run(run: RunLog | str | Path, output: str | Path | None = None, *, title: str | None = None, window: int | None = None) -> Path:
    """Plot a run's curves to a PNG and return its path (default ``<run>/run_curves.png``).

    Panels (each only when the run logged it): the total reward with its std band; one panel per
    reward function (``rewards/<name>/mean``); accept rates (``*/accept_rate``, training and held-out);
    held-out PLUIE (``eval_pluie_mean`` with the p10-p90 band, and every item's score from the
    ``pluie/`` tables); the training loss. Noisy per-step curves are drawn faintly with a trailing
    mean over ``window`` steps on top (default: a tenth of the steps, at least 3).

    Example:
        >>> import json
        >>> run_dir = Path("runs/grpo_paraphrase")  # what a GRPO run with a PluieCallback leaves, written by hand here
        >>> (run_dir / "pluie").mkdir(parents=True)
        >>> log = [{"step": s, "reward": 0.3 * s, "rewards/pluie/mean": 0.3 * s, "loss": 1.0 / s} for s in range(1, 9)]
        >>> _ = (run_dir / "trainer_state.json").write_text(json.dumps({"log_history": log}))
        >>> _ = (run_dir / "pluie" / "step-000000.jsonl").write_text(json.dumps({"score": -1.2, "verdict": False}) + "\\n")
        >>> plot_run("runs/grpo_paraphrase")
        PosixPath('runs/grpo_paraphrase/run_curves.png')
    """
    library("matplotlib", "plot_run").use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    run = run if isinstance(run, RunLog) else read_run(run)
    output = Path(output) if output is not None else run.directory / "run_curves.png"
    panels: list[tuple[str, Any]] = []
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    steps_all = run.series("reward")[0] or [e.get("step", 0) for e in run.history]
    win = window or max(3, len(set(steps_all)) // 10)

    def reward_panel(ax: Any, key: str, std_key: str, color: str, ylabel: str) -> None:
        steps, values = run.series(key)
        s_steps, stds = run.series(std_key)
        if len(s_steps) == len(steps) and stds:
            ax.fill_between(steps, [v - s for v, s in zip(values, stds)], [v + s for v, s in zip(values, stds)],
                            color=color, alpha=0.12, linewidth=0, label="± std over the batch")
        _line(ax, steps, values, key, color, win)
        ax.set_ylabel(ylabel)

    if run.series("reward")[1]:
        panels.append(("total reward (weighted sum of the reward functions)",
                       lambda ax: reward_panel(ax, "reward", "reward_std", colors[0], "reward")))
    for i, name in enumerate(run.reward_names()):
        panels.append((f"reward function '{name}'",
                       lambda ax, name=name, i=i: reward_panel(ax, f"rewards/{name}/mean", f"rewards/{name}/std",
                                                               colors[(i + 1) % len(colors)], f"{name} (batch mean)")))
    accept_keys = [k for k in run.keys() if k.endswith("accept_rate")]
    if accept_keys:
        def accept_panel(ax: Any) -> None:
            for i, key in enumerate(accept_keys):
                steps, values = run.series(key)
                _line(ax, steps, values, key, colors[(i + 3) % len(colors)], win)
            ax.set_ylim(-0.05, 1.05)
            ax.set_ylabel("share of completions the judge accepts")
        panels.append(("accept rate (PLUIE > threshold)", accept_panel))
    if run.series("eval_pluie_mean")[1] or run.tables:
        def eval_panel(ax: Any) -> None:
            for step, rows in sorted(run.tables.items()):
                scores = [r["score"] for r in rows if isinstance(r.get("score"), (int, float))]
                ax.scatter([step] * len(scores), scores, s=10, color="grey", alpha=0.5,
                           label="one held-out item" if step == min(run.tables) else None)
            steps, means = run.series("eval_pluie_mean")
            _, p10 = run.series("eval_pluie_p10")
            _, p90 = run.series("eval_pluie_p90")
            if len(p10) == len(p90) == len(means) and means:
                ax.fill_between(steps, p10, p90, color=colors[5 % len(colors)], alpha=0.15, linewidth=0, label="p10-p90")
            if means:
                ax.plot(steps, means, color=colors[5 % len(colors)], marker="o", linewidth=2, label="eval_pluie_mean")
            unlogged = [(s, m) for s, m in zip(*run.table_means()) if s not in steps]
            if unlogged:  # e.g. the evaluation before train(), which the trainer's state does not keep
                ax.scatter([s for s, _ in unlogged], [m for _, m in unlogged], s=60, marker="D", facecolors="none",
                           edgecolors=colors[5 % len(colors)], linewidths=2, label="table mean (not in trainer_state)")
            ax.axhline(0.0, color="black", linewidth=0.6, linestyle=":")
            ax.set_ylabel("PLUIE = log p(Yes) - log p(No)")
        panels.append(("held-out PLUIE (PluieCallback)", eval_panel))
    if run.series("loss")[1]:
        panels.append(("training loss",
                       lambda ax: (_line(ax, *run.series("loss"), "loss", colors[7 % len(colors)], win), ax.set_ylabel("loss"))))
    if not panels:
        raise ValueError(f"{run.directory}: nothing to plot (no rewards, accept rates, PLUIE evaluations or loss were logged).")

    cols = 1 if len(panels) == 1 else 2
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 3.6 * rows), squeeze=False)
    for ax, (name, draw) in zip(axes.flat, panels):
        draw(ax)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("optimizer step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="best")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(title or f"{run.directory.name}: rewards and PLUIE per optimizer step", fontsize=12)
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return output
