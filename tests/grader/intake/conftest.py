"""The tests of grader/intake/: who handed in what.

The modules below are tested through others (tests/test_layout.py reads these lines)."""

# grader/intake/__init__.py: tested through test_downloads.py (collect, IntakeError)
# grader/intake/deadlines.py: tested through test_exchange.py (due dates, late flags, the newest
#   on time)
# grader/intake/errors.py: tested through test_downloads.py (what cannot be read is said)
# grader/intake/names.py: tested through test_lms_names.py (the students' own names, each once)
#   and test_downloads.py
# grader/intake/roster.py: tested through test_downloads.py (five rosters) and test_lms_names.py
