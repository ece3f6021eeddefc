"""Running a notebook's cells on a real kernel from the trusted side (grader/trusted/execute.py):
a cell stopped at the cell limit costs that cell, not the submission, even when the kernel takes
a while to stop what the cell ran."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import nbformat
import pytest

from grader import course
from grader.trusted import execute, kernels

# The interrupted cell's kernel needs longer than nbclient's few seconds of waiting for its last
# messages (as commlab stopping its ranks on a loaded machine may): a SIGINT handler that sleeps.
SLOW_TO_STOP = '''\
import signal, time
def _slow_stop(*_):
    time.sleep(7)
    raise KeyboardInterrupt
signal.signal(signal.SIGINT, _slow_stop)
time.sleep(120)
'''


@pytest.mark.slow
def test_a_cell_slow_to_stop_at_the_cell_limit_costs_that_cell_only():
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("before = 1"),
        nbformat.v4.new_code_cell(SLOW_TO_STOP),
        nbformat.v4.new_code_cell("print('after', before)"),
    ])
    config = course.nbgrader_config(db=None)
    config.Execute.timeout = 3
    folder = Path(tempfile.mkdtemp(prefix="execute-test-")) / "k"  # short: sockets live there
    env = {k: v for k, v in os.environ.items() if not k.startswith("JPY_")}

    async def run() -> execute.Execution:
        kernel = await kernels.start(folder, None, env, warm_up="None")
        try:
            return await execute.run_in(notebook, kernel, config, limit=120)
        finally:
            await kernel.stop()

    done = asyncio.run(run())
    assert not done.over_limit and not done.died, done
    assert done.interrupted == {1}
    assert [o.get("ename") for o in notebook.cells[1].outputs
            if o.output_type == "error"][-1] == "CellTimeoutError"
    assert notebook.cells[2].outputs[0]["text"] == "after 1\n"
