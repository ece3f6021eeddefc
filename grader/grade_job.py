"""Grade one submission, inside its sandbox (run by autograde.py from the job's folder).

    python grade_job.py CHAPTER STUDENT CELL_TIMEOUT

One Python process does nbgrader's autograde, removes hidden tests from the graded notebook, and
writes the feedback page: starting nbgrader once instead of twice is a good part of the time a
small submission takes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from traitlets.config import Config


def main(chapter: str, student: str, cell_timeout: int) -> int:
    from autograde import strip_for_feedback
    from nbgrader.apps import NbGraderAPI

    root = Path.cwd()
    config = Config()
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.db_url = f"sqlite:///{root / 'gradebook.db'}"
    config.Execute.timeout = cell_timeout
    config.OverwriteCells.add_missing_cells = True
    api = NbGraderAPI(config=config)
    graded = api.autograde(chapter, student, force=True)
    print(graded.get("log", ""))
    if not graded["success"]:
        print(graded.get("error", ""))
    notebook = root / "autograded" / student / chapter / f"{chapter}.ipynb"
    if not notebook.exists():
        return 1
    notebook.chmod(0o644)
    strip_for_feedback(notebook)
    feedback = api.generate_feedback(chapter, student, force=True)
    if not feedback["success"]:
        print(feedback.get("log", ""), feedback.get("error", ""))
    return 0 if graded["success"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
