"""A submission's answers in the scoring kernel: stand-ins, never the student's code.

The scoring kernel never runs a line of the student's code. Where the instructor's notebook has
an answer cell, it holds an :class:`Answer` for each name the solution defines (``my_broadcast``,
``BucketedDDP``). A test cell sends its case function to the ranks with cloudpickle; the stand-in
goes along as an :class:`commlab.answers.Answers` bundle: what the grading rule
(:mod:`commlab.cells`) takes of the cells above that test (the answer cells and the student's
own cells, their definitions only), and the kernel's own definitions (the chapter's imports and
helpers) that those use. In a rank, unpickling it defines them once
(:mod:`grader.sandboxed.define`), in a namespace of their own, and hands back the student's
definition: the rank runs the student's ``my_broadcast``, the kernel only ever sees what the ranks
return.

Called in the kernel itself (``predict_all_reduce("ring", ...)`` in a test cell), a stand-in runs
the student's function on one rank and returns what it returned, as data.
"""

from __future__ import annotations

import builtins
import sys
import uuid
from typing import Any

from commlab import answers
from commlab.answers import Answers

from ..sandboxed.define import call_answer, define_only


class Book:
    """The scoring kernel's copy of one submission's answers (see the module docstring).

    ``pieces``: (label, grade id or None, source) of the cells the rule takes, in the
    notebook's order; ``cuts``: for each test's grade id, how many pieces lie above that test;
    ``shared``: the names the chapter's own cells define (neither answers nor tests), the only
    names of this kernel an answer may be given.
    """

    def __init__(self, pieces: list[tuple[str, str | None, str]], cuts: dict[str, int],
                 shared: set[str] | None = None):
        self.pieces, self.cuts = pieces, cuts
        self.shared = set(shared or ())
        self.test: str | None = None  # the test cell being scored: its pieces are sent
        self._bundle: Answers | None = None

    def forget_bundle(self, *_: Any) -> None:
        """The kernel's namespace is about to change (a new cell): build the next bundle anew."""
        self._bundle = None

    def testing(self, grade_id: str | None) -> None:
        """The test cell ``grade_id`` comes next (None: every piece, as before the first)."""
        self.test = grade_id
        self._bundle = None

    def bundle(self) -> Answers:
        if self._bundle is None:
            cut = self.cuts.get(self.test, len(self.pieces)) if self.test else len(self.pieces)
            pieces = self.pieces[:cut]
            self._bundle = Answers(uuid.uuid4().hex, pieces,
                                   _seed(answers.used_names(pieces) & self.shared))
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
    _building_seed = True
    try:
        return answers.seed(vars(sys.modules["__main__"]), given, Answer)
    finally:
        _building_seed = False


class Answer:
    """The stand-in for one name a solution cell defines."""

    def __init__(self, book: Book, grade_id: str, name: str):
        self.book, self.grade_id, self.name = book, grade_id, name

    def __reduce__(self):
        if _building_seed:
            raise _InSeed(self.name)
        return answers.defined, (self.book.bundle(), self.grade_id, self.name)

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
