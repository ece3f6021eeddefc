"""A submission's answers: stand-ins in the scoring kernel, the student's own code in the ranks.

The scoring kernel never runs a line of the student's code. Where the instructor's notebook has
an answer cell, it holds an :class:`Answer` for each name the solution defines (``my_broadcast``,
``BucketedDDP``). A test cell sends its case function to the ranks with cloudpickle; the stand-in
goes along as an :class:`Answers` bundle: the student's answer cells, the ``import`` lines of all
their cells, and the kernel's own definitions (imports, helpers) that the answers may use. In a
rank, unpickling it executes those cells once, in a namespace of its own, and hands back the
student's definition: the rank runs the student's ``my_broadcast``, the kernel only ever sees
what the ranks return.

Called in the kernel itself (``predict_all_reduce("ring", ...)`` in a test cell), a stand-in runs
the student's function on one rank and returns what it returned, as data.
"""

from __future__ import annotations

import builtins
import dataclasses
import importlib
import importlib.util
import linecache
import sys
import types
import uuid
from typing import Any

import cloudpickle

# Names of the kernel's namespace the ranks never need: IPython's own, and the stand-ins
# themselves (the student's cells define those).
_NOT_SENT = {"In", "Out", "get_ipython", "exit", "quit"}


@dataclasses.dataclass
class Answers:
    """What a rank needs to define a submission's answers.

    key: tells one bundle from another (a rank defines each bundle once); answers: (grade id,
    source) of each answer cell, in the notebook's order; imports: the import lines of the
    student's cells; seed: the kernel's definitions the answers may use (cloudpickled).
    """

    key: str
    answers: list[tuple[str, str]]
    imports: list[str]
    seed: bytes


class Book:
    """The scoring kernel's copy of one submission's answers (see the module docstring)."""

    def __init__(self, answers: list[tuple[str, str]], imports: list[str]):
        self.answers, self.imports = answers, imports
        self._bundle: Answers | None = None

    def forget_bundle(self, *_: Any) -> None:
        """The kernel's namespace is about to change (a new cell): build the next bundle anew."""
        self._bundle = None

    def bundle(self) -> Answers:
        if self._bundle is None:
            self._bundle = Answers(uuid.uuid4().hex, self.answers, self.imports, _seed())
        return self._bundle


class _InSeed(Exception):
    """A definition that refers to an answer (a test's case function): the answers never need
    it, and it would need the bundle being built."""


_building_seed = False


def _seed() -> bytes:
    """The kernel's definitions an answer may refer to, each sent if it can be."""
    global _building_seed
    namespace = vars(sys.modules["__main__"])
    sendable = {}
    _building_seed = True
    try:
        for name, value in list(namespace.items()):
            if name.startswith("_") or name in _NOT_SENT or isinstance(value, Answer):
                continue
            if isinstance(value, types.ModuleType):  # imported in the rank when first used
                sendable[name] = _Module(value.__name__)
                continue
            try:
                cloudpickle.dumps(value)
            except Exception:  # noqa: BLE001 - e.g. a run's result holding a figure, a case
                continue       # function: not what an answer refers to
            sendable[name] = value
    finally:
        _building_seed = False
    return cloudpickle.dumps(sendable)


@dataclasses.dataclass(frozen=True)
class _Module:
    """A module of the kernel's namespace, by name: the rank imports it only if an answer uses
    it (a chapter's ``matplotlib.pyplot`` costs seconds to import, and no answer needs it)."""

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


class Answer:
    """The stand-in for one name a solution cell defines."""

    def __init__(self, book: Book, grade_id: str, name: str):
        self.book, self.grade_id, self.name = book, grade_id, name

    def __reduce__(self):
        if _building_seed:
            raise _InSeed(self.name)
        return defined, (self.book.bundle(), self.grade_id, self.name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from commlab import checks, launch
        from commlab.errors import RankError

        try:
            result = launch.run(call_answer, 1, args=(self, args, kwargs), backend="gloo",
                                init_process_group=False, timeout=checks.GRADING_TIMEOUT)
        except RankError as err:
            raise _as_raised(self.name, err) from None
        return result.returns[0]

    def __mro_entries__(self, bases):
        raise TypeError(f"{self.name} is a student's answer, defined only on the ranks: a test "
                        "can subclass it only inside a function run on the ranks")

    def __repr__(self) -> str:
        return f"<the student's {self.name} (answer cell {self.grade_id})>"


def _as_raised(name: str, err: Exception) -> Exception:
    """The exception a student's function raised on its one rank, as the kernel raises it."""
    kind, _, message = next(iter(getattr(err, "failures", {}).values()), "").partition(": ")
    raised = getattr(builtins, kind, None)
    if isinstance(raised, type) and issubclass(raised, Exception):
        return raised(message)
    return RuntimeError(f"{name} raised {kind}: {message}" if message else str(err))


def call_answer(rank: int, world_size: int, answer: Any, args: tuple, kwargs: dict) -> Any:
    """On the one rank of a stand-in's call: ``answer`` is the student's own definition."""
    return answer(*args, **kwargs)


# --- in a rank ---------------------------------------------------------------------------------

_defined: dict[str, tuple[dict[str, Any], dict[str, str]]] = {}


def defined(bundle: Answers, grade_id: str, name: str) -> Any:
    """The student's definition of ``name`` (from answer cell ``grade_id``), in a rank."""
    if bundle.key not in _defined:
        _defined[bundle.key] = _define(bundle)
    namespace, problems = _defined[bundle.key]
    if name in namespace and not isinstance(namespace[name], Answer):
        return namespace[name]
    if grade_id in problems:
        raise NameError(f"{name} is not defined: your answer cell ({grade_id}) "
                        f"{problems[grade_id]}")
    raise NameError(f"{name} is not defined: the grader runs only your answer cells (and your "
                    f"import lines), and your answer cell ({grade_id}) does not define {name}. "
                    f"Define {name} in that cell.")


def _define(bundle: Answers) -> tuple[dict[str, Any], dict[str, str]]:
    """Run the student's import lines and answer cells in a namespace of their own; return it
    and what went wrong in which cell."""
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    for name, value in cloudpickle.loads(bundle.seed).items():
        namespace[name] = value.load() if isinstance(value, _Module) else value
    problems: dict[str, str] = {}
    for line in bundle.imports:
        try:
            exec(compile(line, "<your imports>", "exec"), namespace)  # noqa: S102
        except Exception:  # noqa: BLE001, S110 - the notebook's own run shows this error
            pass
    for grade_id, source in bundle.answers:
        filename = f"<answer cell {grade_id}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        try:
            exec(compile(source, filename, "exec"), namespace)  # noqa: S102
        except BaseException as exc:  # noqa: BLE001 - said when its names are asked for
            problems[grade_id] = f"raised {type(exc).__name__} when it ran: {exc}"
    return namespace, problems
