"""grader/trusted/kernels.py: where the grader finds matplotlib's font list without importing
matplotlib. Its kernels' start, warm-up and stop are tested through test_execute.py and
test_batch.py (a kernel that cannot start)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support.course_copy import ROOT

BOTH = "\n".join([
    "import json, matplotlib",
    "from grader.trusted import kernels",
    "print(json.dumps([matplotlib.get_cachedir(), str(kernels.matplotlib_cache())]))",
])


@pytest.mark.parametrize("setting", ["MPLCONFIGDIR", "XDG_CACHE_HOME", "HOME"])
def test_the_font_list_is_looked_for_where_matplotlib_keeps_it(tmp_path, setting):
    env = {key: value for key, value in os.environ.items()
           if key not in ("MPLCONFIGDIR", "XDG_CACHE_HOME")}
    env[setting] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", BOTH], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    matplotlibs, ours = json.loads(done.stdout)
    assert ours == matplotlibs and ours.startswith(str(tmp_path)), (setting, done.stdout)
