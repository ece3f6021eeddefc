"""The tests of helpers/commlab/, one file per module where a module has tests of its own.

The modules below are tested through others (tests/test_layout.py reads these lines)."""

# helpers/commlab/__init__.py: tested through test_imports.py (its lazy names, each module
#   importable first) and test_drawing.py (the public names stay functions)
# helpers/commlab/activations.py: tested through test_pipeline.py (the activations a stage holds,
#   the Busy layer)
# helpers/commlab/capture.py: tested through test_launch.py (each rank's output in rank order, a
#   huge output cut) and test_in_jupyter.py (what a cell shows)
# helpers/commlab/control.py: tested through test_launch.py and test_in_jupyter.py (every run's
#   reports cross it), and tests/chapters/test_attacks.py (reports a submission forged)
# helpers/commlab/errors.py: tested through test_launch.py and test_in_jupyter.py (what a failed
#   run raises), and tests/grader/test_wire.py (the same errors back from a rank host)
# helpers/commlab/explain.py: tested through test_in_jupyter.py (a crash names the rank, the
#   signal and the cause; a skipped collective) and test_launch.py (an endless loop, a hang under
#   debug)
# helpers/commlab/figure_parts.py: tested through test_drawing.py (value labels, the fixed figure,
#   baselines)
# helpers/commlab/p2p.py: tested through test_drawing.py (a send and its receive drawn as one
#   message)
# helpers/commlab/palette.py: tested through test_drawing.py (cells coloured by the rank of their
#   value)
# helpers/commlab/picture_content.py: tested through test_drawing.py (what each cell holds, from
#   real runs)
# helpers/commlab/picture_layout.py: tested through test_drawing.py (layouts, labels at eight
#   ranks, baselines)
# helpers/commlab/plain.py: tested through tests/grader/test_wire.py (what may cross from the
#   ranks, and what is refused)
# helpers/commlab/preload_dynamo.py: tested through test_processes.py (torch._dynamo already
#   imported in a rank)
# helpers/commlab/preload_memory.py: tested through test_processes.py (a rank forked from the
#   frozen forkserver still imports and steps an optimizer) and bench/launch_bench.py (what
#   it saves)
# helpers/commlab/preload_start.py: tested through test_processes.py (the ranks collect garbage,
#   the forkserver's imports frozen out of their collector's sight)
# helpers/commlab/rehearsal.py: tested through test_launch.py (nothing of a rehearsal shows in
#   the run: no group, no call in the trace, no output or warning)
# helpers/commlab/rendezvous.py: tested through test_launch.py (the store on the loopback alone,
#   quick lookups)
# helpers/commlab/result.py: tested through test_launch.py (returns and outputs in rank order) and
#   test_in_jupyter.py (the HTML view)
# helpers/commlab/ring.py: tested through test_drawing.py (each step of a ring, a run that is not
#   one refused)
# helpers/commlab/standby.py: tested through test_launch.py (the next run takes the ranks
#   started ahead, starts the rest itself; they end when closed or when their launcher dies)
# helpers/commlab/status.py: tested through test_launch.py and test_in_jupyter.py (where each rank
#   is when a run hangs or fails)
# helpers/commlab/watch.py: tested through test_launch.py (an endless loop stopped, a killed rank)
#   and test_in_jupyter.py (a skipped collective within the timeout)
# helpers/commlab/worker.py: tested through test_launch.py (a rank's environment and threads,
#   sys.exit, a return that cannot be sent)
