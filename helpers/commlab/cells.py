"""What grading takes from a notebook's cells, read from the code without running it: the one
rule that the grader, Validate and ``make check`` all apply.

**The rule.** For each test cell, the student's answers are defined from the code cells above
it, in the notebook's order. Test cells are skipped. From every other cell (the answer cells,
the cells the student added, a chapter's cell the student changed) only the top-level
definitions are taken: ``import`` lines, ``def``s, ``class``es and assignments that call
nothing (``N = 4``, ``SIZES = (2, 3)``). A statement that computes (a call, a loop, a print,
``commlab.run``, an assignment into an object) is never run; a class body and a ``def``'s
defaults and decorators run, as Python runs them when it defines the class or function. The
chapter's own cells, as the course gave them, give their definitions as the chapter itself
made them.

:func:`pieces` cuts a notebook into what the rule takes, :mod:`commlab.answers` defines the
answers from it (in a rank, for the grader; in the kernel, for Validate and ``make check``).
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import symtable
from collections.abc import Iterable, Mapping
from typing import Any

_DEFINING = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# nbgrader's marks of a code cell, in its metadata
ANSWER, TEST, OTHER = "answer", "test", "other"


def parse(source: str) -> tuple[ast.Module, list[str]] | None:
    """A cell's code as Python (IPython's magics turned into calls) and its lines; None if it
    does not parse."""
    try:
        # IPython's own syntax (magics, !commands, help?) is never Python, so a cell that parses
        # as Python is what IPython would run as it is, and the grader skips IPython's tokenizer
        # (a tenth of a second per submission)
        return ast.parse(source), source.splitlines()
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        python = TransformerManager().transform_cell(source)
        return ast.parse(python), python.splitlines()
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def syntax_error(source: str) -> SyntaxError | None:
    """The error that stops a cell from running at all, or None (IPython's own syntax is
    allowed, as IPython allows it)."""
    if parse(source) is not None:
        return None
    try:
        compile(source, "<cell>", "exec")
    except SyntaxError as exc:
        return exc
    except (ValueError, RecursionError, MemoryError) as exc:
        return SyntaxError(f"{type(exc).__name__}: {exc}")
    return SyntaxError("the cell is not Python")


def _first_line(node: ast.stmt) -> int:
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])


def _text(node: ast.stmt, lines: list[str]) -> str:
    return "\n".join(lines[_first_line(node) - 1:node.end_lineno])


def _names_only(target: ast.expr) -> bool:
    if isinstance(target, (ast.Tuple, ast.List)):
        return all(_names_only(t) for t in target.elts)
    return isinstance(target, ast.Name)


def _calls_nothing(node: ast.stmt) -> bool:
    """``N = 4``, ``SIZES = (2, 3)``: an assignment to names of a value that calls nothing (an
    assignment into an object, ``module.attribute = ...``, changes something else: not a
    definition)."""
    value = getattr(node, "value", None)
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return isinstance(node, (ast.Assign, ast.AnnAssign)) and value is not None and all(
        _names_only(t) for t in targets) and not any(
        isinstance(n, (ast.Call, ast.Await, ast.Yield, ast.YieldFrom)) for n in ast.walk(value))


def is_definition(node: ast.stmt) -> bool:
    """A top-level statement the rule takes: an import, ``def``, ``class``, or an assignment
    that calls nothing."""
    return isinstance(node, _DEFINING) or _calls_nothing(node)


def definitions(source: str, referenced: set[str] | None = None) -> str:
    """The top-level imports, ``def``s, ``class``es and call-free assignments of a cell, each
    on the lines it has in the cell (the others left blank), so that an error's line number is
    the cell's own. With ``referenced``, an import that binds none of those names is left out
    too."""
    parsed = parse(source)
    if parsed is None:
        return ""
    tree, lines = parsed
    text = "\n".join(lines)
    touching: dict[int, int] = {}  # line -> how many top-level statements stand on it
    for node in tree.body:
        for line in range(_first_line(node), node.end_lineno + 1):
            touching[line] = touching.get(line, 0) + 1
    kept: list[str | None] = [""] * len(lines)
    for node in tree.body:
        if not is_definition(node) or (
                referenced is not None and isinstance(node, (ast.Import, ast.ImportFrom))
                and not bound_names(ast.unparse(node)) & referenced):
            continue
        first, last = _first_line(node), node.end_lineno
        if all(touching[line] == 1 for line in range(first, last + 1)):
            kept[first - 1:last] = lines[first - 1:last]
            continue
        # one of several statements on a line (``N = 4; run()``): this one alone, on its lines
        segment = ast.get_source_segment(text, node) or ""
        kept[first - 1] = f"{kept[first - 1]}; {segment}" if kept[first - 1] else segment
        kept[first:last] = [None] * (last - first)  # the segment's own newlines hold them
    code = "\n".join(line for line in kept if line is not None).rstrip()
    return f"{code}\n" if code else ""


def skipped(source: str) -> dict[str, tuple[int, str]]:
    """The names that only a statement the rule skips binds in a cell: name -> (line, that
    statement's first line)."""
    parsed = parse(source)
    if parsed is None:
        return {}
    tree, lines = parsed
    kept = bound_names(definitions(source))
    found: dict[str, tuple[int, str]] = {}
    for node in tree.body:
        if is_definition(node):
            continue
        for name in sorted(bound_names(_text(node, lines)) - kept):
            found.setdefault(name, (node.lineno, lines[node.lineno - 1].strip()))
    return found


def imports(source: str) -> list[str]:
    """The top-level import lines of a cell."""
    parsed = parse(source)
    if parsed is None:
        return []
    tree, lines = parsed
    return [_text(node, lines) for node in tree.body
            if isinstance(node, (ast.Import, ast.ImportFrom))]


def defined_names(source: str) -> list[str]:
    """The names a cell defines with ``def`` or ``class``."""
    parsed = parse(source)
    if parsed is None:
        return []
    return [node.name for node in parsed[0].body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def bound_names(source: str) -> set[str]:
    """Every name a cell binds at its top level (definitions, assignments, imports, loops)."""
    parsed = parse(source)
    if parsed is None:
        return set()
    table = symtable.symtable(ast.unparse(parsed[0]), "<cell>", "exec")
    return {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}


def provided_names(source: str) -> set[str]:
    """The names grading takes from a cell that is neither an answer nor a test."""
    return bound_names(definitions(source))


def free_names(source: str) -> set[str]:
    """The names a cell's code uses (also inside its functions) that it does not bind itself,
    builtins aside: what it needs from elsewhere in the notebook."""
    parsed = parse(source)
    if parsed is None:
        return set()
    top = symtable.symtable(ast.unparse(parsed[0]), "<cell>", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    used: set[str] = set()
    tables = [top]
    while tables:
        table = tables.pop()
        tables += table.get_children()
        for symbol in table.get_symbols():
            if table is top:
                if symbol.is_referenced():
                    used.add(symbol.get_name())
            elif symbol.is_global():  # not bound in the function, nor in one around it
                used.add(symbol.get_name())
    return used - bound - set(dir(builtins))


def referenced_names(source: str) -> set[str]:
    """Every name a cell's code refers to, at its top level or inside its functions."""
    parsed = parse(source)
    if parsed is None:
        return set()
    return {node.id for node in ast.walk(parsed[0]) if isinstance(node, ast.Name)}


# --- a notebook, as the rule sees it ------------------------------------------------------------

def _meta(cell: Mapping[str, Any]) -> Mapping[str, Any]:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def _source(cell: Mapping[str, Any]) -> str:
    source = cell.get("source", "")
    return source if isinstance(source, str) else "".join(source)


def kind(cell: Mapping[str, Any]) -> str | None:
    """A code cell's part in grading (:data:`ANSWER`, :data:`TEST` or :data:`OTHER`), from
    nbgrader's marks; None for a cell that is not code. (A manually graded answer is graded
    and a solution: nbgrader's "test" is a graded cell that is not a solution.)"""
    if cell.get("cell_type") != "code":
        return None
    meta = _meta(cell)
    if meta.get("grade") and not meta.get("solution"):
        return TEST
    if meta.get("solution") and not meta.get("grade"):
        return ANSWER
    return OTHER


def grade_id(cell: Mapping[str, Any]) -> str | None:
    return _meta(cell).get("grade_id")


@dataclasses.dataclass(frozen=True)
class Piece:
    """A cell the rule takes from: how to name it to a student, its answer's grade id (None
    for a cell of the student's), and its whole source (the rank keeps its definitions)."""

    label: str
    grade_id: str | None
    source: str


def label(cell: Mapping[str, Any]) -> str:
    """How messages name a cell, after "your": ``answer cell 01-my-broadcast``, or ``cell "def
    helper(x):"`` (its first line: a cell the student added has no other name)."""
    if kind(cell) == ANSWER:
        return f"answer cell {grade_id(cell)}"
    first = next((line.strip() for line in _source(cell).splitlines() if line.strip()), "")
    return f'cell "{first[:40]}{"…" if len(first) > 40 else ""}"'


def given_sources(release: Iterable[Mapping[str, Any]]) -> set[str]:
    """The sources of the chapter's own cells (neither answers nor tests), as the course gives
    them: such a cell in a submission comes from the course, not from the student."""
    return {_source(c).strip() for c in release if kind(c) == OTHER}


def shared_names(release: Iterable[Mapping[str, Any]]) -> set[str]:
    """What the chapter's own cells give the answers: the definitions of its cells that are
    neither answers nor tests, and the import lines of its answer cells."""
    names: set[str] = set()
    for cell in release:
        part = kind(cell)
        if part == OTHER:
            names |= provided_names(_source(cell))
        elif part == ANSWER:
            names |= bound_names("\n".join(imports(_source(cell))))
    return names


def answer_names(release: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """name -> the grade id of the answer cell that must define it."""
    return {name: grade_id(c) for c in release if kind(c) == ANSWER
            for name in defined_names(_source(c))}


def pieces(cells: Iterable[Mapping[str, Any]], given: set[str]
           ) -> tuple[list[Piece], dict[str, int]]:
    """What the rule takes of a notebook: its pieces in order (answer cells, and the cells that
    are not the course's own), and, for each test cell's grade id, how many of those pieces lie
    above it."""
    found: list[Piece] = []
    cuts: dict[str, int] = {}
    for cell in cells:
        part = kind(cell)
        if part == TEST:
            cuts.setdefault(grade_id(cell), len(found))
        elif part == ANSWER or (part == OTHER and _source(cell).strip()
                                and _source(cell).strip() not in given):
            found.append(Piece(label(cell), grade_id(cell) if part == ANSWER else None,
                               _source(cell)))
    return found, cuts
