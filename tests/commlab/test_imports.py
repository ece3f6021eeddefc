"""commlab's modules form layers: each imports only modules below it, never one that imports it
back, so that every module can be read, tested and imported on its own."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import commlab

PACKAGE = Path(commlab.__file__).parent
MODULES = sorted(path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__")

# One fresh interpreter imports torch once, then forks a child per module that imports that
# module first, before any other of commlab's: a circle among the modules' top-level imports
# would fail there ("partially initialized module"), whichever module it starts from.
IMPORT_EACH_ALONE = """
import importlib, os, sys, traceback
import torch

failed = []
for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module("commlab." + name)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0:
        failed.append(name)
print(" ".join(failed))
"""


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(module: str) -> set[str]:
    """The commlab modules ``module`` imports, at its top or inside a function (an import that
    runs only on first use still makes a circle), leaving out those for type checkers."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child):
                continue
            if isinstance(child, ast.ImportFrom) and child.level == 1:
                names = [child.module] if child.module else [a.name for a in child.names]
                found.update(name.split(".")[0] for name in names)
            elif isinstance(child, ast.ImportFrom) and (child.module or "").startswith(
                    "commlab."):
                found.add(child.module.split(".")[1])
            elif isinstance(child, ast.Import):
                found.update(a.name.split(".")[1] for a in child.names
                             if a.name.startswith("commlab."))
            visit(child)

    visit(tree)
    return found & set(MODULES)


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of the graph as ``[a, b, ..., a]``, or None."""
    done: set[str] = set()

    def walk(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        for imported in sorted(graph[module]):
            found = walk(imported, path + [module])
            if found:
                return found
        done.add(module)
        return None

    for module in sorted(graph):
        found = walk(module, [])
        if found:
            return found
    return None


def test_each_commlab_module_imports_alone_first():
    out = subprocess.run([sys.executable, "-c", IMPORT_EACH_ALONE, *MODULES],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"imported first, these failed:\n{out.stderr}"


def test_commlab_modules_import_each_other_without_a_circle():
    graph = {module: _imports(module) for module in MODULES}
    circle = _circle(graph)
    assert circle is None, " imports ".join(circle)


def test_the_circle_finder_finds_a_circle():
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_every_public_name_is_listed_and_found_before_anything_loads_it():
    # outside a kernel the launcher and the pictures load on first use (commlab.__getattr__):
    # still listed, so that completion after ``commlab.`` offers them, and found when asked
    code = ("import sys, commlab\n"
            "print('torch' in sys.modules, sorted(set(commlab.__all__) - set(dir(commlab))))\n"
            "print(sorted(n for n in commlab.__all__ if getattr(commlab, n, None) is None))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.splitlines() == ["False []", "[]"], done.stderr
