"""The package's layers (docs/architecture.md): tools -> integrations -> engines/core. A module never
imports from a layer above its own, at module level or inside a function; module-level imports form
no cycle. Read from the source with ``ast`` (no import needed)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "pluie_reward"
LAYERS = {"core": 1, "engines": 1, "templates": 0, "integrations": 2, "tools": 3, "testing": 3}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) < 2:
        return 0  # the package's own __init__: lazy exports only
    if parts[1] == "judges":  # the packaged adapter's constants are data; its build/evaluate scripts are tools
        return 0 if len(parts) == 2 else 3
    return LAYERS.get(parts[1], 3)


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


def test_no_module_imports_from_a_layer_above():
    wrong = []
    for name, path in MODULES.items():
        for target, _, line in imports(path):
            resolved = known(target, set(MODULES))
            if resolved and layer(resolved) > layer(name):
                wrong.append(f"{path.relative_to(ROOT.parent)}:{line}: {name} (layer {layer(name)}) imports {resolved} (layer {layer(resolved)})")
    assert not wrong, "\n".join(wrong)


def test_module_level_imports_form_no_cycle():
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        edges = set()
        for target, at_top, _ in imports(path):
            resolved = known(target, set(MODULES))
            if at_top and resolved and resolved != name and not name.startswith(resolved + "."):
                edges.add(resolved)
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
    assert not cycles, cycles
