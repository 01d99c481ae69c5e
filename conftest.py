"""Names the docstring examples of ``pluie_reward/`` use without defining them (pytest runs them with
``--doctest-modules``; the fixtures of the test suite are in ``tests/conftest.py``).

Each doctest gets fresh objects, built only when its examples mention them (a tiny model costs
milliseconds; nothing is downloaded):

* ``judge``: a tiny random judge (:func:`pluie_reward.testing.make_tiny_judge`). Its scores are
  deterministic but meaningless, so examples show types, keys or ``...`` rather than values.
* ``model``, ``tokenizer``: the tiny judge's causal LM and tokenizer (ChatML chat template).
* ``peft_model`` (alias ``policy``): a tiny model under two LoRA adapters, ``"default"`` (active,
  trainable: a policy's) and ``"judge"`` (frozen: a judge sharing the policy's weights).
* ``ids``: ``tokenizer("The cat sleeps on the mat.", return_tensors="pt").input_ids``.

Examples that need a meaningful judge call ``Judge.load()`` themselves (the embedded default judge,
offline; converted once into ``~/.cache/pluie_reward``).

Doctests run torch on one thread (restored afterwards): on a machine whose cores other work also
uses, two OpenMP threads wait on each other and the examples run several times slower.

Each doctest runs in a fresh temporary working directory, so examples write ``out/...`` as users
would, and ``$PARAPHRASUS_DIR`` points at the PARAPHRASUS data in ``../shared`` for the examples that
read it (found by :func:`shared_path`, as for the tests: skipped, naming the path, when it is missing).

Tests and doctests leave nothing in the checkout: a session fixture fails the run when it ends with a
file or folder there that git neither tracks nor ignores and that was not there when it began (write
under ``tmp_path``).
"""

import doctest
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest


# tests/shared_files.py: the one way tests and doctests reach ../shared (tests/conftest.py imports this same module)
if "shared_files" not in sys.modules:
    _spec = importlib.util.spec_from_file_location("shared_files", Path(__file__).resolve().parent / "tests" / "shared_files.py")
    sys.modules["shared_files"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["shared_files"])
shared_path = sys.modules["shared_files"].shared_path
# functions whose examples read the PARAPHRASUS files
_READS_SHARED = re.compile(r"\b(load_pairs|run_paraphrasus|find_data_dir|peer_results|read_pairs|PARAPHRASUS_DIR)\b")


def _tiny(name: str) -> dict:
    from pluie_reward.testing import make_tiny_judge

    judge = make_tiny_judge()
    objects = {"judge": judge, "model": judge.model, "tokenizer": judge.tokenizer}
    objects["ids"] = judge.tokenizer("The cat sleeps on the mat.", return_tensors="pt").input_ids
    if name in ("peft_model", "policy"):
        from peft import LoraConfig, get_peft_model

        lora = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}
        peft_model = get_peft_model(judge.model, LoraConfig(**lora))
        peft_model.add_adapter("judge", LoraConfig(**lora, inference_mode=True))
        objects = {"peft_model": peft_model, "policy": peft_model, "tokenizer": judge.tokenizer, "ids": objects["ids"]}
    return objects


_NAMES = ("peft_model", "policy", "judge", "model", "tokenizer", "ids")
# the adapters of frameworks that are not dependencies (docs/rewards.md, "verifiers and SkyRL") import them at module
# level: their doctests are collected where the framework is installed (CI's leg b; tests/test_env_frameworks.py)
collect_ignore = [f"pluie_reward/serving/{name}.py" for name, module in (("verifiers_judge", "verifiers"), ("skyrl_env", "skyrl_gym"))
                  if importlib.util.find_spec(module) is None]
_ROOT = Path(__file__).resolve().parent


def untracked_entries(root: Path = _ROOT) -> set[str] | None:
    """What git lists as untracked in a checkout: files, and folders as ``name/`` (empty ones too,
    which ``git status`` does not show); ``None`` where ``root`` is not a git work tree."""
    try:
        done = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "--directory", "-z"],
                              cwd=root, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return set(filter(None, done.stdout.split("\0"))) if done.returncode == 0 else None


@pytest.fixture(scope="session", autouse=True)
def _no_files_left_in_the_checkout():
    """Fails the session (an error at the teardown of its last test) when the tests left files or
    folders in the checkout that were not there before: they belong under ``tmp_path``."""
    before = untracked_entries()
    yield
    after = untracked_entries()
    if before is not None and after is not None:
        left = sorted(after - before)
        assert not left, f"the tests left {left} in the checkout ({_ROOT}): write them under tmp_path"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A doctest whose examples are all ``+SKIP`` is reported under its own name and place (pytest names only its
    own doctest module: "all tests skipped by +SKIP option")."""
    report = (yield).get_result()
    dtest = getattr(item, "dtest", None)
    if dtest is not None and report.skipped and isinstance(report.longrepr, tuple) and "+SKIP" in report.longrepr[2]:
        report.longrepr = (dtest.filename, (dtest.lineno or 0) + 1, f"doctest {dtest.name}: every example is marked +SKIP "
                           "(each says why: a long load, a GPU, a server...)")


@pytest.fixture(autouse=True)
def _doctest_objects(request):
    """A temporary working directory and fresh tiny objects for the names a doctest's examples
    mention (doctests only: the tests' fixtures are in tests/conftest.py)."""
    dtest = getattr(request.node, "dtest", None)
    if dtest is None:
        yield
        return
    doctest_namespace = request.getfixturevalue("doctest_namespace")
    monkeypatch = request.getfixturevalue("monkeypatch")
    tmp_path = request.getfixturevalue("tmp_path")
    source = "\n".join(example.source for example in dtest.examples if not example.options.get(doctest.SKIP))
    if _READS_SHARED.search(source):
        monkeypatch.setenv("PARAPHRASUS_DIR", str(shared_path("data/paraphrasus")))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PLUIE_REWARD_URL", raising=False)  # an example may set it; unset again afterwards
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    request.addfinalizer(lambda: torch.set_num_threads(threads))
    wanted = [name for name in _NAMES if re.search(rf"(?<![\w.]){name}\b", source)]
    added: dict = {}
    for name in wanted:
        if name not in added:
            built = _tiny(name)
            added.update({k: v for k, v in built.items() if k not in added})
    doctest_namespace.update(added)
    yield
    for name in added:
        doctest_namespace.pop(name, None)
