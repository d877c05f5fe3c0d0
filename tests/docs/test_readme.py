"""README.md's usage block is short and runs as written.

The first ``python`` block under the ``## Use`` heading is what a new user copies:
it must stay within 12 code lines and 3 import lines (an Avalanche EWC script takes
about 10 and 5), and it runs here in a child process with one math-library thread,
in an empty directory, with its decisions and final accuracy checked.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

MAX_LINES = 12
MAX_IMPORTS = 3


def usage_block() -> str:
    """The first fenced python block after the ``## Use`` heading."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Use\n", 1)
    assert len(section) == 2, "README.md has no '## Use' section"
    match = re.search(r"```python\n(.*?)```", section[1], flags=re.S)
    assert match, "README.md's '## Use' section has no python block"
    return match.group(1)


def test_usage_block_is_short():
    code = [line for line in usage_block().splitlines() if line.strip() and not line.lstrip().startswith("#")]
    imports = [line for line in code if line.startswith(("import ", "from "))]
    assert len(code) <= MAX_LINES, f"{len(code)} code lines in README's usage block (at most {MAX_LINES})"
    assert len(imports) <= MAX_IMPORTS, f"{len(imports)} import lines in README's usage block: {imports}"


def test_usage_block_runs(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    done = subprocess.run([sys.executable, "-c", usage_block()], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    # The block's two prints: the decisions (before the evaluation's log) and the accuracy.
    decisions = ast.literal_eval(next(line for line in lines if line.startswith("['warm_start'")))
    assert decisions[:3] == ["warm_start"] * 3
    assert len(decisions) == 10 and set(decisions[3:]) <= {"new", "reuse"} and "reuse" in decisions
    assert float(lines[-1]) > 0.9  # mean test accuracy over the 10 tasks (stream accuracy)
    # Decisions reach Avalanche's default InteractiveLogger as metric values.
    assert "SDR_Decision/train_phase/train_stream/Task003 = [SDR] task 3:" in done.stdout
