"""The package's layers (docs/architecture.md), one floor each, lowest first:

0 ground        common/ (errors, the HTTP client, weight fingerprints), templates/ and judges/ (data)
1 engines       engines/ (run a model on token ids)
2 core          core/ (the Judge: templates, prompt binding, plan, calibration, result cache)
3 integrations  integrations/ (rewards, callbacks, datasets, and what they share with the clients and tools)
4 serving       serving/ (the judge server and its clients)
5 tools         tools/ (the commands), __main__.py, and the package's own __init__ (it exports names of every layer)

testing.py (tiny models and the engine conformance suite, for tests) imports the Judge and the engine
protocol, which puts it on core's floor. A module never imports from a floor above its own, at module
level or inside a function; imports form no cycle (function-local ones included). Read from the source with ``ast`` (no
import needed)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "pluie_reward"
FLOORS = {
    "common": 0, "templates": 0, "judges": 0,
    "engines": 1,
    "core": 2, "testing": 2,
    "integrations": 3,
    "serving": 4,
    "tools": 5, "__main__": 5, "__init__": 5,
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def entry(module: str) -> str:
    """The package's top-level folder or module ``module`` belongs to (``__init__``: the package's own)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer(module: str) -> int:
    return FLOORS[entry(module)]


def imports(path: Path) -> list[tuple[str, bool, int]]:
    """(imported pluie_reward module, at module level?, line) for every import in ``path``."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(n) for n in tree.body} | {id(n) for t in tree.body if isinstance(t, (ast.If, ast.Try)) for n in ast.walk(t)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            targets = [target] + [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for target in targets:
            if target.startswith("pluie_reward"):
                found.append((target, id(node) in top, node.lineno))
    return found


def known(target: str, modules: set[str]) -> str | None:
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def test_every_part_of_the_package_has_a_floor():
    """Each top-level folder and module of the package is on one floor of FLOORS, and FLOORS names no other."""
    entries = {p.stem if p.is_file() else p.name for p in ROOT.iterdir()
               if (p.is_file() and p.suffix == ".py") or (p.is_dir() and not p.name.startswith(("_", ".")))}
    assert entries == set(FLOORS), f"without a floor: {sorted(entries - set(FLOORS))}; not in the package: {sorted(set(FLOORS) - entries)}"


def test_no_module_imports_from_a_layer_above():
    wrong = set()
    for name, path in MODULES.items():
        for target, _, line in imports(path):
            resolved = known(target, set(MODULES))
            if resolved and layer(resolved) > layer(name):
                wrong.add(f"{path.relative_to(ROOT.parent)}:{line}: {name} (floor {layer(name)}) imports {resolved} (floor {layer(resolved)})")
    assert not wrong, "\n".join(sorted(wrong))


def test_core_reaches_engines_only_through_the_protocol_and_the_registry():
    """``core`` imports ``engines.base`` (the protocol) and ``engines.registry`` (engines by name, imported
    when made), no concrete engine module, at module level or inside a function."""
    allowed = {"pluie_reward.engines", "pluie_reward.engines.base", "pluie_reward.engines.registry"}
    wrong = []
    for name, path in MODULES.items():
        if not name.startswith("pluie_reward.core"):
            continue
        found = {(line, known(target, set(MODULES)) or "") for target, _, line in imports(path)}
        for line, resolved in sorted(found):
            if resolved.startswith("pluie_reward.engines") and resolved not in allowed:
                wrong.append(f"{path.relative_to(ROOT.parent)}:{line}: {name} imports {resolved}")
    assert not wrong, "\n".join(wrong)


def test_imports_form_no_cycle():
    """No two modules import each other, directly or around a circle, counting every import: at module level
    and inside a function (a function-local import only hides a circle: client.py once imported genrm.py in a
    function while genrm.py imported client.py's private _Coalescer)."""
    graph: dict[str, dict[str, int]] = {}  # module -> {imported module: line}
    for name, path in MODULES.items():
        edges: dict[str, int] = {}
        for target, _, line in imports(path):
            resolved = known(target, set(MODULES))
            if resolved and resolved != name and not name.startswith(resolved + "."):
                edges.setdefault(resolved, line)
        graph[name] = edges
    # a package's __init__ importing its submodules is how packages work; a submodule importing the
    # package's __init__ back (or two modules importing each other) is a cycle
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    where = [f"{MODULES[a].relative_to(ROOT.parent)}:{graph[a][b]}: {a} imports {b}" for c in cycles for a in c for b in c if b in graph[a]]
    assert not cycles, "import cycles (make the dependency go one way; move what both need to a module below them):\n" + "\n".join(where)


# Function-local imports of the package ------------------------------------------------------------
# A module imports the package's modules at module level, unless a comment on the import (or on the
# comment line right above a block of imports) says why not, with one of these reasons, each checked:
#   "# optional: DEP"             the imported module needs DEP, an optional dependency (pyproject.toml's
#                                 extras), when it is imported;
#   "# lazy: CLI start-up"        the importing module loads with `pluie-reward --help`, and the imported one
#                                 loads a heavy or optional dependency (torch, transformers...) or modules
#                                 that --help does not load otherwise (a command's library, kept off start-up);
#   "# lazy: package exports"     a package's __getattr__ (PEP 562) keeps a heavy module off the package's import;
#   "# lazy: httpx-only client"   a module that must import with httpx alone (LIGHT_CLIENTS) defers the rest.
REASON = re.compile(r"#\s*(optional: ([\w.-]+)|lazy: (CLI start-up|package exports|httpx-only client))")
HEAVY = {"torch", "transformers", "accelerate", "datasets", "gguf"}  # core dependencies too slow for start-up
LIGHT_CLIENTS = {name: {"torch", "transformers", "yaml"} for name in ("pluie_reward.serving.client", "pluie_reward.serving.openrlhf")}


def optional_dependencies() -> set[str]:
    """Import names of pyproject.toml's extras (read with a regex: tomllib is Python >= 3.11)."""
    text = (ROOT.parent / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    section = "\n".join(line.split("#", 1)[0] for line in section.splitlines())
    return {name.replace("-", "_").lower() for name in re.findall(r'"([A-Za-z0-9_.-]+)', section)}


def runtime_imports(path: Path) -> tuple[set[str], set[str]]:
    """(package modules, top-level names of other modules) that importing ``path`` runs: module-level
    imports, outside functions and ``if TYPE_CHECKING:`` blocks."""
    ours: set[str] = set()
    others: set[str] = set()
    top = {(target, line) for target, at_top, line in imports(path) if at_top}

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and not node.level and not (node.module or "").startswith("pluie_reward"):
            others.add((node.module or "").split(".")[0])
        elif isinstance(node, ast.Import):
            others.update(a.name.split(".")[0] for a in node.names if not a.name.startswith("pluie_reward"))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            ours.update(t for t, line in top if line == node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {m for m in (known(t, set(MODULES)) for t in ours) if m}, others


RUNTIME = {name: runtime_imports(path) for name, path in MODULES.items()}


def loaded_with(names: set[str]) -> set[str]:
    """The package's modules that importing ``names`` loads (their packages' ``__init__`` included)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in MODULES]
        todo += RUNTIME[name][0]
    return seen


def dependencies_of(names: set[str]) -> set[str]:
    """Other top-level modules (torch, httpx...) that importing ``names`` loads."""
    return set().union(*(RUNTIME[m][1] for m in loaded_with(names)))


def command_modules() -> set[str]:
    """``COMMAND_MODULES`` of tools/cli/main.py: what ``pluie-reward`` imports before parsing arguments."""
    tree = ast.parse((ROOT / "tools" / "cli" / "main.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "COMMAND_MODULES" for t in node.targets):
            return set(ast.literal_eval(node.value)) | {"pluie_reward.tools.cli.main"}
    raise AssertionError("tools/cli/main.py has no COMMAND_MODULES")


def function_local_imports(path: Path) -> list[tuple[ast.stmt, set[str], bool, str]]:
    """(import node, package modules it imports, inside a module __getattr__?, its reason comment or "")."""
    lines = path.read_text(encoding="utf-8").splitlines()
    tree = ast.parse("\n".join(lines))
    local: dict[int, set[str]] = {}  # line -> the package's modules imported there
    for target, at_top, line in imports(path):
        if not at_top:
            local.setdefault(line, set()).update(m for m in [known(target, set(MODULES))] if m)
    exports = {id(n) for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "__getattr__" for n in ast.walk(f)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and node.lineno in local:
            text = " ".join(lines[node.lineno - 1 : node.end_lineno])
            above = node.lineno - 2  # a comment line above a block of imports speaks for the block
            while above >= 0 and re.match(r"\s*(from|import) ", lines[above]):
                above -= 1
            if above >= 0 and lines[above].strip().startswith("#"):
                text += " " + lines[above]
            match = REASON.search(text)
            out.append((node, local[node.lineno], id(node) in exports, match.group(1) if match else ""))
    return out


def test_function_local_imports_of_the_package_say_why():
    optional = optional_dependencies()
    start_up = loaded_with(command_modules())
    wrong = []
    for name, path in MODULES.items():
        for node, targets, in_getattr, reason in function_local_imports(path):
            needs = dependencies_of(targets)
            where = f"{path.relative_to(ROOT.parent)}:{node.lineno}: {ast.unparse(node)}"
            if not reason:
                wrong.append(f"{where}: import it at module level, or say why not (# optional: DEP, # lazy: CLI start-up, "
                             "# lazy: package exports)")
            elif reason.startswith("optional: "):
                dep = reason.split(": ", 1)[1]
                if dep not in optional or dep not in needs:
                    wrong.append(f"{where}: {dep} is not an optional dependency this import loads ({sorted(needs & optional)})")
            elif reason == "lazy: CLI start-up":
                if name not in start_up:
                    wrong.append(f"{where}: 'CLI start-up', but `pluie-reward --help` does not load {name}")
                elif not needs & (HEAVY | optional) and loaded_with(targets) <= start_up:
                    wrong.append(f"{where}: 'CLI start-up', but `pluie-reward --help` loads {sorted(targets)} anyway")
            elif reason == "lazy: package exports":
                if not (path.name == "__init__.py" and in_getattr and needs & (HEAVY | optional)):
                    wrong.append(f"{where}: 'package exports' is for a package __getattr__ deferring a heavy module")
            elif reason == "lazy: httpx-only client":
                if not needs & LIGHT_CLIENTS.get(name, set()):
                    wrong.append(f"{where}: 'httpx-only client' is for {sorted(LIGHT_CLIENTS)} deferring what they must not load")
    assert not wrong, "\n".join(wrong)


def test_the_command_line_starts_without_heavy_dependencies():
    """``pluie-reward --help`` and argument errors load no torch, transformers or optional dependency."""
    heavy = sorted(dependencies_of(command_modules()) & (HEAVY | optional_dependencies()))
    assert not heavy, f"the command modules load {heavy} when imported; import it where the command runs (# lazy: CLI start-up)"


def test_the_http_clients_import_with_httpx_alone():
    """The judge server's clients load no torch, transformers or yaml when imported (tests/test_fields.py
    imports them with those blocked)."""
    heavy = {name: sorted(dependencies_of({name}) & banned) for name, banned in LIGHT_CLIENTS.items()}
    assert not any(heavy.values()), heavy


def test_only_commands_import_the_command_line_package():
    """A tool's library code does not import ``tools.cli``: what it shares with the commands lives below (tools.shared)."""
    allowed = command_modules()
    wrong = []
    for name, path in MODULES.items():
        if name in allowed or name.startswith("pluie_reward.tools.cli") or name.endswith("__main__"):
            continue
        for line in sorted({line for target, _, line in imports(path)
                            if (known(target, set(MODULES)) or "").startswith("pluie_reward.tools.cli")}):
            wrong.append(f"{path.relative_to(ROOT.parent)}:{line}: {name} imports the command-line package")
    assert not wrong, "\n".join(wrong)


LINE_CAP = 25_000


def test_the_package_stays_under_its_line_cap():
    """The package (``pluie_reward/**/*.py``, every line: code, docstrings, comments and blank lines, as
    ``find pluie_reward -name '*.py' | xargs cat | wc -l`` counts them) holds at most LINE_CAP lines."""
    lines = sum(path.read_text(encoding="utf-8").count("\n") for path in ROOT.rglob("*.py"))
    assert lines <= LINE_CAP, (
        f"the package holds {lines} lines, {lines - LINE_CAP} over its cap of {LINE_CAP}: pay for what you add by deleting "
        "dead code (functions, parameters and branches nothing calls), reusing a function that already does the job, or "
        "calling the standard library or a dependency instead of a hand-written twin; never by stripping docstrings, "
        "examples or bad-input checks, nor by packing lines (docs/architecture.md)."
    )
