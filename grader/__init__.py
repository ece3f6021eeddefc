"""Autograde the course's chapters: ``python -m grader grade|generate|validate|merge``."""
