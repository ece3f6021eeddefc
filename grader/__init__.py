"""Autograde the course's chapters: ``python -m grader grade|merge|export|collect|
release-feedback|generate|validate`` (see grader/cli.py: each command and its options)."""
