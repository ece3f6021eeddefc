"""The instructor's side of the course: generating, validating and grading notebooks."""
