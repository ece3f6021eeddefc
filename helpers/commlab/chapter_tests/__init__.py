"""Each chapter's test helpers, one module a chapter (``chNN_name.py``): the case functions and
checks its visible test cells use, which a test cell defines in the notebook's namespace with
:func:`commlab.checks.test_helpers`, so that the cell a student reads is a few lines. Hidden
tests stay in the instructor's notebook (``solutions/``), never here."""
