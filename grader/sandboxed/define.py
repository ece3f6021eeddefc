"""Inside a rank: the student's answers defined from the bundle the scoring kernel sent.

The scoring kernel sends, with each test's case function, an :class:`commlab.answers.Answers`
bundle for the answers the case uses (see :mod:`grader.trusted.stand_ins`). Unpickling it here
calls :func:`commlab.answers.defined`, which runs the definitions the grading rule takes from the
student's cells (:mod:`commlab.cells`) once per bundle, in a namespace of their own, and hands
back the student's definition. This is the only place where a student's code is executed during
grading; Validate and ``make check`` define the answers with the same code, in the student's own
kernel.
"""

from __future__ import annotations

from typing import Any

from commlab.answers import Answers, define


def define_only(rank: int, world_size: int, bundle: Answers) -> dict[str, str]:
    """On one rank, before any test: define the answers and nothing else. What went wrong in
    which cell comes back (a cell that raised); a cell that ends the process, or never
    finishes, shows as the launch's failure."""
    return {label: f"{type(exc).__name__}: {exc}" for label, exc in define(bundle).problems.items()}


def call_answer(rank: int, world_size: int, answer: Any, args: tuple, kwargs: dict) -> Any:
    """On the one rank of a stand-in's call: ``answer`` is the student's own definition."""
    return answer(*args, **kwargs)
