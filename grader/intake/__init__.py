"""Who handed in what: a class's submissions found in a folder or an LMS download, and matched
to the roster (see :mod:`grader.intake.downloads` for the layouts it reads)."""

from .downloads import LAYOUTS, Intake, Skipped, Submission, collect
from .errors import IntakeError

__all__ = ["LAYOUTS", "Intake", "IntakeError", "Skipped", "Submission", "collect"]
