"""A submission's answers in the scoring kernel: stand-ins, never the student's code.

The scoring kernel never runs a line of the student's code. Where the instructor's notebook has
an answer cell, it holds an :class:`Answer` for each name the solution defines (``my_broadcast``,
``BucketedDDP``). A test cell sends its case function to the ranks with cloudpickle; the stand-in
goes along as an :class:`Answers` bundle: the student's answer cells, the ``import`` lines of their
other cells that bind a name the answers use, and the kernel's own definitions (imports, helpers)
that the answers may use. In a rank, unpickling it executes those cells once
(:mod:`grader.sandboxed.define`), in a namespace of its own, and hands back the student's
definition: the rank runs the student's ``my_broadcast``, the kernel only ever sees what the ranks
return.

Called in the kernel itself (``predict_all_reduce("ring", ...)`` in a test cell), a stand-in runs
the student's function on one rank and returns what it returned, as data.
"""

from __future__ import annotations

import builtins
import sys
import types
import uuid
from typing import Any

import cloudpickle

from commlab.cells import bound_names, free_names

from ..sandboxed.define import Answers, _Module, call_answer, define_only, defined

# Names of the kernel's namespace the ranks never need: IPython's own, and the stand-ins
# themselves (the student's cells define those).
_NOT_SENT = {"In", "Out", "get_ipython", "exit", "quit"}


class Book:
    """The scoring kernel's copy of one submission's answers (see the module docstring).

    ``shared``: the names the chapter's own cells define (neither answers nor tests), the only
    names of this kernel an answer may be given.
    """

    def __init__(self, answers: list[tuple[str, str]], imports: list[str],
                 shared: set[str] | None = None):
        used = set().union(*(free_names(source) for _, source in answers)) if answers else set()
        # only the import lines that bind a name the answers use: every rank of every launch
        # runs them, and a chapter's `import matplotlib.pyplot as plt` alone costs each rank
        # a fifth of a second that no answer needs
        self.answers = answers
        self.imports = [line for line in imports if bound_names(line) & used]
        self.given = used & set(shared or ())
        self._bundle: Answers | None = None

    def forget_bundle(self, *_: Any) -> None:
        """The kernel's namespace is about to change (a new cell): build the next bundle anew."""
        self._bundle = None

    def bundle(self) -> Answers:
        if self._bundle is None:
            self._bundle = Answers(uuid.uuid4().hex, self.answers, self.imports,
                                   _seed(self.given))
        return self._bundle


class _InSeed(Exception):
    """A definition that refers to an answer (a test's case function): the answers never need
    it, and it would need the bundle being built."""


_building_seed = False


def _seed(given: set[str]) -> bytes:
    """The chapter's definitions the answers refer to, each sent if it can be: never a name a
    test cell made (its checks, its cases, a hidden test's values), which an answer could call
    to learn what the test expects."""
    global _building_seed
    namespace = vars(sys.modules["__main__"])
    sendable = {}
    _building_seed = True
    try:
        for name, value in list(namespace.items()):
            if (name not in given or name.startswith("_") or name in _NOT_SENT
                    or isinstance(value, Answer)):
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




class AnswersEndedTheirProcess(RuntimeError):
    """Defining the answer cells ended the process that ran them (``os._exit``, a crash)."""


class AnswersDidNotFinish(TimeoutError):
    """Defining the answer cells never finished."""


def define_first(book: Book) -> None:
    """Define the submission's answers on one rank, before any test, as a kernel that runs the
    notebook would: answer cells that end the process that runs them, or never finish, stop
    the submission here (the grader's "kernel died" and "timed out")."""
    from commlab import checks, launch
    from commlab.errors import CollectiveTimeout, RankCrashed

    try:
        launch.run(define_only, 1, args=(book.bundle(),), backend="gloo",
                   init_process_group=False, timeout=checks.GRADING_TIMEOUT)
    except RankCrashed as exc:
        raise AnswersEndedTheirProcess(
            "Your answer cells ended the process that ran them when the grader defined them "
            f"({next(iter(exc.signals.values()), 'it exited')}): no test could run. Remove "
            "os._exit, sys.exit or whatever crashes at the top level of your answer cells."
        ) from None
    except CollectiveTimeout:
        raise AnswersDidNotFinish(
            f"Your answer cells did not finish within {checks.GRADING_TIMEOUT:g} s when the "
            "grader defined them (a loop that never ends at the top level of a cell?): no test "
            "could run.") from None
