"""The tests are laid out like the code, so that a newcomer finds a module's tests where the
module is: every module under helpers/ and grader/ has a test file at the mirrored path, named
after it (helpers/commlab/launch.py: tests/commlab/test_launch.py; grader/trusted/batch.py:
tests/grader/trusted/test_batch.py), or a line in that folder's conftest.py that says where it
is tested:

    # grader/sandboxed/seal.py: tested through test_rankhost.py (a launch is sealed)

helpers/scripts/, helpers/site/ and helpers/jupyter/ are the course's own tools: their tests and
lines are in tests/course/. A line's test files and folders must exist, and so must its module.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

# where the tests of each part of the code live, most specific first
MIRRORS = [("helpers/commlab", "tests/commlab"), ("grader", "tests/grader"),
           ("helpers", "tests/course")]
ENTRY = re.compile(r"^# (\S+\.py): (.*)$")
MORE = re.compile(r"^#   (.*)$")
NAMED = re.compile(r"(?:tests/)?[\w/.]*test_\w+\.py|tests/[\w/.]+/")


def _modules() -> list[str]:
    """Every module under helpers/ and grader/ with more in it than a docstring."""
    found = []
    for top in ("helpers", "grader"):
        for path in sorted((ROOT / top).rglob("*.py")):
            body = ast.parse(path.read_text()).body
            if body and ast.get_docstring(ast.Module(body, [])) is not None:
                body = body[1:]
            if body:
                found.append(path.relative_to(ROOT).as_posix())
    return found


def _folder(module: str) -> str:
    """The test folder of ``module``: the mirror of its own folder."""
    parent = module.rsplit("/", 1)[0]
    for code, tests in MIRRORS:
        if parent == code or parent.startswith(code + "/"):
            return tests + parent[len(code):] if code != "helpers" else tests
    raise AssertionError(f"{module} is in no part of the code that tests/ mirrors")


def _lines() -> dict[str, tuple[Path, str]]:
    """module -> (the conftest.py that names it, what the line says), from every conftest."""
    lines: dict[str, tuple[Path, str]] = {}
    for conftest in sorted(TESTS.rglob("conftest.py")):
        module = None
        for line in conftest.read_text().splitlines():
            if entry := ENTRY.match(line):
                module = entry.group(1)
                assert module not in lines, f"{module}: a line in {conftest} and {lines[module][0]}"
                lines[module] = (conftest, entry.group(2))
            elif (more := MORE.match(line)) and module:
                lines[module] = (conftest, lines[module][1] + " " + more.group(1))
            else:
                module = None
    return lines


def test_every_module_has_its_tests_where_a_newcomer_looks():
    lines = _lines()
    lost = []
    for module in _modules():
        folder = _folder(module)
        mirrored = ROOT / folder / f"test_{Path(module).stem}.py"
        conftest = ROOT / folder / "conftest.py"
        if not mirrored.exists() and lines.get(module, (None,))[0] != conftest:
            lost.append(f"{module}: neither {mirrored.relative_to(ROOT)} nor a line "
                        f"'# {module}: tested through ...' in {conftest.relative_to(ROOT)}")
    assert lost == [], "\n".join(lost)


def test_every_line_names_a_module_and_tests_that_exist():
    modules = set(_modules())
    for module, (conftest, said) in _lines().items():
        where = conftest.relative_to(ROOT)
        assert module in modules, f"{where} names {module}, which is not a module of the code"
        assert said.startswith("tested through "), f"{where}: {module}: {said}"
        named = NAMED.findall(said)
        assert named, f"{where}: the line for {module} names no test file"
        for name in named:
            place = ROOT / name if name.startswith("tests/") else conftest.parent / name
            assert place.exists(), f"{where}: the line for {module} names {name}, not found"
