"""What grading takes from each kind of notebook cell, read from the code without running it.

The grader (``grader/trusted/scoring_notebook.py``) defines a student's answers from their
answer cells and the ``import`` lines of their notebook, and gives them the chapter's own
definitions (the imports, ``def``s, ``class``es and assignments that call nothing of its other
cells). ``make check``
(``helpers/scripts/check_notebook.py``) uses the same rules to warn a student whose answer
leans on a cell the grader never runs.
"""

from __future__ import annotations

import ast
import builtins
import symtable

_DEFINING = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


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


def _text(node: ast.stmt, lines: list[str]) -> str:
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return "\n".join(lines[first - 1:node.end_lineno])


def _calls_nothing(node: ast.stmt) -> bool:
    value = getattr(node, "value", None)
    return isinstance(node, (ast.Assign, ast.AnnAssign)) and value is not None and not any(
        isinstance(n, (ast.Call, ast.Await, ast.Yield, ast.YieldFrom)) for n in ast.walk(value))


def definitions(source: str) -> str:
    """The top-level imports, ``def``s, ``class``es and call-free assignments of a cell."""
    parsed = parse(source)
    if parsed is None:
        return ""
    tree, lines = parsed
    return "\n".join(_text(node, lines) for node in tree.body
                     if isinstance(node, _DEFINING) or _calls_nothing(node))


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
