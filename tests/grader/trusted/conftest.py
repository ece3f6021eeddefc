"""The tests of grader/trusted/: where a grade is decided.

The modules below are tested through others (tests/test_layout.py reads these lines)."""

# grader/trusted/exchange_feedback.py: tested through tests/grader/intake/test_exchange.py
#   (feedback released and fetched, each student her own page)
# grader/trusted/feedback.py: tested through tests/grader/test_autograde.py (results without
#   hidden tests, a huge output cut) and tests/chapters/test_attacks.py (no script a student
#   wrote)
# grader/trusted/scoring_kernel.py: tested through tests/grader/sandboxed/test_rankhost.py and
#   tests/grader/test_autograde.py
# grader/trusted/scratch.py: tested through test_batch.py (a killed run cleaned up by the next)
# grader/trusted/tamper.py: tested through tests/grader/test_autograde.py (tampering found)
# grader/trusted/verdict.py: tested through tests/grader/test_autograde.py (each submission's
#   status and score) and test_export.py
