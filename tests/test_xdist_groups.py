"""make test's scheduling: the tests of one ``xdist_group`` run on one worker.

Several modules (``tests/jax/test_many_devices.py``, ``tests/distributed/``, the tpu plugin's
HBM checks, ...) keep a costly module fixture (child interpreters, jobs of several processes)
and are marked ``xdist_group`` so that ``--dist loadgroup`` (the Makefile's ``PYTEST_RUN``)
sends all of a module's tests to one worker and the fixture runs once. With pytest 9.2 and
pytest-xdist 3.8 nothing was grouped (xdist renames items through a field pytest 9.2 no longer
reads): every such fixture ran on both workers and make test passed 15 minutes. This runs a
small suite the way the Makefile does and asserts the grouping holds.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

GROUPED = textwrap.dedent("""
    import pytest

    pytestmark = pytest.mark.xdist_group("one_group")

    @pytest.mark.parametrize("n", range(6))
    def test_grouped(n):
        pass
""")
UNGROUPED = textwrap.dedent("""
    import pytest

    @pytest.mark.parametrize("n", range(6))
    def test_free(n):
        pass
""")


def test_one_groups_tests_all_run_on_one_worker(tmp_path):
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "test_free.py").write_text(UNGROUPED)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
         "--dist", "loadgroup", "-v", "-o", "addopts=", "--rootdir", str(tmp_path),
         str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    workers: dict[str, set[str]] = {}
    for line in result.stdout.splitlines():
        match = re.match(r"\[(gw\d+)\] .*PASSED \S*::(test_\w+)\[", line)
        if match:
            workers.setdefault(match.group(2), set()).add(match.group(1))
    assert set(workers) == {"test_grouped", "test_free"}, result.stdout[-3000:]
    assert len(workers["test_grouped"]) == 1, (
        f"the grouped tests ran on workers {sorted(workers['test_grouped'])}: --dist loadgroup "
        f"groups nothing with this pytest / pytest-xdist pair")
