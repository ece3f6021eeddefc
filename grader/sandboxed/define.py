"""Inside a rank: the student's answer cells defined from the bundle the scoring kernel sent.

The scoring kernel sends, with each test's case function, an :class:`Answers` bundle for each
answer the case uses (see :mod:`grader.trusted.stand_ins`). Unpickling it here calls
:func:`defined`, which runs the student's import lines and answer cells once per bundle, in a
namespace of their own, and hands back the student's definition. This is the only place where a
student's code is executed during grading.
"""

from __future__ import annotations

import builtins
import dataclasses
import importlib
import importlib.util
import linecache
import sys
import types
from typing import Any

import cloudpickle


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


def define_only(rank: int, world_size: int, bundle: Answers) -> dict[str, str]:
    """On one rank, before any test: define the answers and nothing else. What went wrong in
    which cell comes back (a cell that raised); a cell that ends the process, or never
    finishes, shows as the launch's failure."""
    return _define(bundle)[1]


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
    if name in namespace and not type(namespace[name]).__name__ == 'Answer':
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
