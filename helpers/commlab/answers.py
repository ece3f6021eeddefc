"""A student's answers as grading defines them: from the pieces of the notebook that the rule of
:mod:`commlab.cells` takes, in a namespace of their own, never from the kernel's.

The grader sends, with each test's case function, an :class:`Answers` bundle; unpickling it in
a rank calls :func:`defined`, which runs the bundle's definitions once and hands back the
student's answer. Validate and ``make check`` do the same in the student's own kernel
(:func:`prepare_notebook` puts, before each test cell, a cell that calls :func:`as_graded`), so
that a test passes there exactly when it passes for the grader: an answer that leans on a
statement the grader never runs fails in all three, with the same words.
"""

from __future__ import annotations

import builtins
import dataclasses
import importlib
import importlib.util
import json
import linecache
import sys
import types
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cloudpickle

from . import cells

# Names of a kernel's namespace the answers never get: IPython's own.
NOT_SENT = {"In", "Out", "get_ipython", "exit", "quit"}


@dataclasses.dataclass
class Answers:
    """What a rank needs to define a submission's answers.

    key: tells one bundle from another (a process defines each bundle once); pieces: (label,
    grade id or None, source) of each cell the rule takes from, in the notebook's order; seed:
    the chapter's own definitions the pieces use (cloudpickled), as the chapter made them.
    """

    key: str
    pieces: list[tuple[str, str | None, str]]
    seed: bytes


@dataclasses.dataclass(frozen=True)
class Module:
    """A module of the chapter's namespace, by name: imported only if an answer uses it (a
    chapter's ``matplotlib.pyplot`` costs seconds to import, and no answer needs it)."""

    name: str

    def load(self) -> types.ModuleType:
        if self.name in sys.modules:
            return sys.modules[self.name]
        spec = importlib.util.find_spec(self.name)
        if spec is None or spec.loader is None:
            return importlib.import_module(self.name)  # says what is missing
        spec.loader = importlib.util.LazyLoader(spec.loader)
        module = importlib.util.module_from_spec(spec)
        sys.modules[self.name] = module
        spec.loader.exec_module(module)
        return module


def used_names(pieces: list[tuple[str, str | None, str]]) -> set[str]:
    """The names the pieces' definitions use and do not define: what to seed them with."""
    return set().union(*(cells.free_names(cells.definitions(source))
                         for _, _, source in pieces)) if pieces else set()


def seed(namespace: Mapping[str, Any], names: set[str], skip: type | None = None) -> bytes:
    """``names`` of ``namespace``, each sent if it can be (modules by name); never one of
    IPython's, nor a stand-in (``skip``)."""
    sendable: dict[str, Any] = {}
    for name in sorted(names):
        if name not in namespace or name.startswith("_") or name in NOT_SENT:
            continue
        value = namespace[name]
        if skip is not None and isinstance(value, skip):
            continue
        if isinstance(value, types.ModuleType):
            sendable[name] = Module(value.__name__)
            continue
        try:
            cloudpickle.dumps(value)
        except Exception:  # noqa: BLE001 - e.g. a run's result holding a figure: not what an
            continue       # answer refers to
        sendable[name] = value
    return cloudpickle.dumps(sendable)


# --- defining them (in a rank, or in a student's kernel) ---------------------------------------

@dataclasses.dataclass
class Defined:
    """A bundle, defined: its namespace, what went wrong in which piece (label -> the exception
    to raise for it), and the names only a skipped statement binds (name -> why not defined)."""

    namespace: dict[str, Any]
    problems: dict[str, BaseException]
    skipped: dict[str, str]


_defined: dict[str, Defined] = {}
# In a process that defined answers: name -> why the grader's rule leaves it undefined (read by
# :func:`explain_name_error` when a rank's code raises NameError).
SKIPPED: dict[str, str] = {}


def define(bundle: Answers) -> Defined:
    """Run the definitions of the bundle's pieces, in order, in a namespace of their own seeded
    with the chapter's definitions; what went wrong is kept, not raised."""
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    for name, value in cloudpickle.loads(bundle.seed).items():
        namespace[name] = value.load() if isinstance(value, Module) else value
    problems: dict[str, BaseException] = {}
    skipped: dict[str, str] = {}
    # an import no piece refers to is left out: every rank of every launch would run it, and a
    # notebook's `import matplotlib.pyplot as plt` alone costs a rank a fifth of a second
    referenced = set().union(*(cells.referenced_names(source) for _, _, source in bundle.pieces)) \
        if bundle.pieces else set()
    for label, _, source in bundle.pieces:
        filename = f"<{label}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        error = cells.syntax_error(source)
        if error is not None:
            problems[label] = _located(error, label)
            continue
        for name, (line, text) in cells.skipped(source).items():
            skipped[name] = (f"`{name}` is set in your {label}, line {line}, by a statement "
                             f"that calls something (`{text}`): grading takes from each cell "
                             "only its imports, defs, classes and assignments that call "
                             f"nothing. Set `{name}` inside the function that uses it, or "
                             "assign it a constant.")
        try:
            exec(compile(cells.definitions(source, referenced), filename, "exec"),
                 namespace)  # noqa: S102
        except BaseException as exc:  # noqa: BLE001 - said when its names are asked for
            problems[label] = exc
    for name in list(skipped):
        if name in namespace:
            del skipped[name]
    SKIPPED.update(skipped)
    return Defined(namespace, problems, skipped)


def _located(error: SyntaxError, label: str) -> SyntaxError:
    """A cell's SyntaxError, naming the cell and its line: "'(' was never closed (your answer
    cell 01-my-broadcast, line 2)"."""
    return SyntaxError(error.msg, (f"your {label}", error.lineno, error.offset, error.text))


def _as_raised(problem: BaseException, label: str) -> BaseException:
    """The exception a cell raised while it was defined, again, with the cell and its line."""
    if isinstance(problem, SyntaxError):
        return SyntaxError(problem.msg, (problem.filename, problem.lineno, problem.offset,
                                         problem.text))
    lines = [frame.lineno for frame in _frames(problem) if frame.filename == f"<{label}>"]
    where = f"your {label}" + (f", line {lines[-1]}" if lines else "")
    message = f"{problem} ({where}, while grading defined it)"
    try:
        return type(problem)(message)
    except Exception:  # noqa: BLE001 - an exception class that takes other arguments
        return RuntimeError(f"{type(problem).__name__}: {message}")


def _frames(problem: BaseException) -> list[Any]:
    import traceback

    return list(traceback.extract_tb(problem.__traceback__))


def defined(bundle: Answers, grade_id: str, name: str) -> Any:
    """The student's definition of ``name`` (which answer cell ``grade_id`` should define)."""
    if bundle.key not in _defined:
        _defined[bundle.key] = define(bundle)
    done = _defined[bundle.key]
    value = done.namespace.get(name)
    if name in done.namespace and not isinstance(value, StandIn) and not (
            type(value).__name__ == "Answer"):
        return value
    label = f"answer cell {grade_id}"
    if label in done.problems:
        raise _as_raised(done.problems[label], label)
    if name in done.skipped:
        raise NameError(done.skipped[name])
    raise NameError(f"{name} is not defined: grading defines your answers from your answer cells "
                    "and the imports, defs, classes and assignments that call nothing of the "
                    f"cells above the test, and none of them defines {name}. Define {name} in "
                    f"your {label}.")


def explain_name_error(exc: BaseException) -> str | None:
    """Why a NameError happened, where the grading rule skipped the statement that sets the
    name (see :func:`define`); None for any other error."""
    if isinstance(exc, NameError):
        return SKIPPED.get(getattr(exc, "name", None) or "")
    return None


class StandIn:
    """In a student's kernel (Validate, ``make check``): an answer as the grader defines it.
    Sent to a rank, it is defined there from its bundle; called here, it is defined here."""

    def __init__(self, bundle: Answers, grade_id: str, name: str):
        self.bundle, self.grade_id, self.name = bundle, grade_id, name

    def __reduce__(self):
        return defined, (self.bundle, self.grade_id, self.name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return defined(self.bundle, self.grade_id, self.name)(*args, **kwargs)
        except NameError as exc:
            why = explain_name_error(exc)
            if why is None:
                raise
            raise NameError(f"{exc}. {why}", name=exc.name) from None

    def __mro_entries__(self, bases):
        raise TypeError(f"{self.name} is your answer, defined as the grader defines it: a test "
                        "can subclass it only inside a function run on the ranks")

    def __repr__(self) -> str:
        return f"<your {self.name}, as graded (answer cell {self.grade_id})>"


def as_graded(data: dict, namespace: dict | None = None) -> None:
    """In a student's kernel, before a test cell: bind each answer name to its definition as
    the grader makes it (``data`` from :func:`prepare_notebook`), in ``namespace`` (the
    notebook's, ``__main__``)."""
    main = vars(sys.modules["__main__"]) if namespace is None else namespace
    pieces = [tuple(piece) for piece in data["pieces"]]
    shared = set(data["shared"]) if data.get("shared") is not None else set()
    bundle = Answers(uuid.uuid4().hex, pieces, seed(main, used_names(pieces) & shared, StandIn))
    for name, grade_id in data["answers"].items():
        main[name] = StandIn(bundle, grade_id, name)


# --- Validate and make check ---------------------------------------------------------------------

COURSE = Path(__file__).resolve().parents[2]


def release_cells(grade_ids: list[str], course: Path = COURSE) -> list[dict] | None:
    """The code cells of the course's own copy of the chapter whose test cells are
    ``grade_ids`` (``notebooks/NN_name/NN_name.ipynb``), or None where the course is not
    beside this package."""
    prefixes = {gid.split("-", 1)[0] for gid in grade_ids if "-" in gid}
    for prefix in sorted(prefixes):
        for path in sorted((course / "notebooks").glob(f"{prefix}_*/{prefix}_*.ipynb")):
            cells_of = json.loads(path.read_text())["cells"]
            if set(grade_ids) <= {cells.grade_id(c) for c in cells_of}:
                return cells_of
    return None


CALL = '__import__("commlab.answers").answers.as_graded({data!r})'


def prepare_notebook(notebook: Any, course: Path = COURSE) -> None:
    """nbclient's ``on_notebook_start`` hook: before each test cell of ``notebook``, a cell
    that binds the answers as the grader defines them (:func:`as_graded`). The cells added
    have no grading marks: nbgrader's Validator reports only on the test cells."""
    code = [c for c in notebook.cells if c.get("cell_type") == "code"]
    tests = [cells.grade_id(c) for c in code if cells.kind(c) == cells.TEST]
    if not tests:
        return
    release = release_cells(tests, course)
    given = cells.given_sources(release) if release is not None else set()
    shared = sorted(cells.shared_names(release)) if release is not None else None
    names = cells.answer_names(release if release is not None else code)
    found, cuts = cells.pieces(code, given)
    new_cells = []
    for cell in notebook.cells:
        if cells.kind(cell) == cells.TEST:
            data = {"pieces": [dataclasses.astuple(p) for p in found[:cuts[cells.grade_id(cell)]]],
                    "answers": names, "shared": shared}
            new_cells.append(_code_cell(CALL.format(data=data)))
        new_cells.append(cell)
    notebook.cells[:] = new_cells


def _code_cell(source: str) -> Any:
    import nbformat

    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = ["commlab-as-graded"]
    return cell
