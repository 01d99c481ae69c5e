"""No silent first step in the command line: loading the judge says so on stderr before it starts, the command
pays no warm-up on a template it does not use, and waiting OpenMP threads sleep rather than spin (on a shared CPU,
spinning made each forward pass of the default judge ~20x slower)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pluie_reward import Judge
from pluie_reward.testing import make_tiny_judge


def _fake_load(calls):
    def load(model=None, **kwargs):
        calls.append((model, kwargs))
        return make_tiny_judge()

    return load


def test_loading_the_judge_is_said_before_it_starts_and_pays_no_warm_up(monkeypatch, capsys, tmp_path):
    from pluie_reward.tools import cli

    calls = []
    monkeypatch.setattr(Judge, "load", _fake_load(calls))
    assert cli.main(["score", "--template", "para-direct", "The cat sleeps.", "A cat is asleep."]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "pluie-reward score: loading the default judge (SmolLM2-135M-Instruct + its PLUIE adapter)...", err
    assert err[1].endswith(", template para-direct; scoring 1 item..."), err  # the first call (a prefix pass) is announced
    assert len(calls) == 1 and calls[0][1].get("warm_up") is False, calls  # the first call pays on para-direct itself
    assert cli.main(["score", "--model", str(tmp_path), "a", "b"]) == 0  # a folder (the load itself is mocked)
    assert capsys.readouterr().err.splitlines()[0] == f"pluie-reward score: loading {tmp_path}..."


@pytest.mark.parametrize("model", ["no-such-org/no-such-model", "./no-such-folder", "no-such-judge.gguf"])
def test_a_model_that_is_not_there_fails_before_torch_loads(model, tmp_path):
    """A wrong --model is refused (exit 2, one line) before torch and transformers are imported: they took 12-21 s first."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # the Hub is not asked: the answer comes from the cache (empty here)
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "pluie_reward", "score", "--model", model, "a", "b"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
    assert said[0] == f"pluie-reward score: loading {model}..." and said[1].startswith(f"pluie-reward score: error: --model {model}")
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert not imported & {"torch", "transformers"}


def test_the_command_line_makes_waiting_threads_sleep_unless_told(monkeypatch, capsys):
    from pluie_reward.tools import cli

    from pluie_reward.common import threads

    monkeypatch.setattr(threads, "busy_cores", lambda cpus: 1.0)  # another process keeps a core busy
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert cli.main(["templates"]) == 0
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert cli.main(["templates"]) == 0
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


@pytest.mark.parametrize("busy, cpus, threads", [(0.0, 2, None), (0.4, 2, None), (0.6, 2, "1"), (1.6, 2, "1"), (2.0, 2, "1"),
                                                  (3.6, 16, "12"), (0.6, 16, "15")])
def test_torch_takes_a_thread_per_core_other_work_leaves_free(monkeypatch, busy, cpus, threads):
    """A thread waiting for a partner that is not scheduled stalls: on 2 cores at load 5, the GRPO smoke run took 210-249 s
    with 2 threads and 166 s with 1; on idle cores torch's own spinning threads were fastest (57 s against 75-79 s). Busy
    over half a core: the cores left free, sleeping (at least 1); idle: nothing set. A user's own values stay."""
    from pluie_reward.common import threads as module

    monkeypatch.setattr(module, "busy_cores", lambda cpus: busy)
    monkeypatch.setattr(module.os, "sched_getaffinity", lambda pid: set(range(cpus)))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    module.fit_threads()
    expected = (threads, "PASSIVE") if threads else (None, None)
    assert (os.environ.get("OMP_NUM_THREADS"), os.environ.get("OMP_WAIT_POLICY")) == expected
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    module.fit_threads(busy=1.6)
    assert os.environ["OMP_NUM_THREADS"] == "7"


def test_busy_cores_reads_the_cpu_now_not_the_last_minute():
    """Every core kept busy by processes started half a second ago reads as busy (the 1-minute load average would still
    read ~0.4 of each, and still count a command ended a minute ago)."""
    from pluie_reward.common.threads import busy_cores

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if not Path("/proc/stat").is_file() or cpus < 2:
        pytest.skip("needs /proc/stat and 2 cores")
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cpus)]
    try:
        time.sleep(0.5)
        readings = [busy_cores(cpus) for _ in range(3)]
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert cpus - 0.6 <= max(readings) <= cpus + 1e-9, readings
