"""The tests of grader/sandboxed/: where student code runs.

The modules below are tested through others (tests/test_layout.py reads these lines)."""

# grader/sandboxed/define.py: tested through tests/grader/test_autograde.py and
#   tests/chapters/test_attacks.py (every graded answer is defined there, in a rank), and
#   tests/commlab/test_answers.py (commlab.answers.define, which it calls)
# grader/sandboxed/replay.py: tested through test_rankhost.py (the grader's own replays are only
#   tidied)
# grader/sandboxed/seal.py: tested through test_rankhost.py (a launch is sealed) and
#   tests/chapters/test_attacks.py (attacks on the seal)
# grader/sandboxed/syscalls.py: tested through test_rankhost.py (a launch is sealed) and
#   tests/chapters/test_attacks.py (sockets, shared memory, terminals)
