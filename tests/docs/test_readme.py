"""README.md's usage block is short and runs as written.

The first ``python`` block under the ``## Use`` heading is what a new user copies:
it must stay within 12 code lines and 3 import lines (an Avalanche EWC script takes
about 10 and 5). It runs here twice as a user runs it (a file in an empty folder, one
math-library thread): both runs print the same stdout, the one README shows below the
block, and one plain progress line per task on stderr.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

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


def expected_output() -> str:
    """The first ``text`` block after the usage block: what it prints on stdout."""
    section = README.read_text(encoding="utf-8").split("\n## Use\n", 1)[1]
    match = re.search(r"```python\n.*?```.*?```text\n(.*?)```", section, flags=re.S)
    assert match, "README.md's '## Use' section shows no expected output (a ```text block after the code)"
    return match.group(1)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The usage block run twice as a user runs it (a file, one torch thread, an empty
    folder); ``[(stdout, stderr), (stdout, stderr)]``. About 20 s a run on 2 cores."""
    folder = tmp_path_factory.mktemp("use")
    (folder / "use.py").write_text(usage_block(), encoding="utf-8")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "use.py"], cwd=folder, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append((done.stdout, done.stderr))
    return runs


@pytest.mark.slow
def test_usage_block_gives_the_same_output_twice_and_the_shown_one(two_runs):
    (first, err), (second, _) = two_runs
    assert first == second, "the usage block printed different lines on two runs"
    lines, shown = first.strip().splitlines(), expected_output().strip().splitlines()
    assert len(lines) == 2 == len(shown), first
    # The decisions exactly as shown; the accuracy as shown up to rounding on another CPU.
    assert ast.literal_eval(lines[0]) == ast.literal_eval(shown[0])
    assert abs(float(lines[1]) - float(shown[1])) < 0.006, (lines[1], shown[1])
    decisions = ast.literal_eval(lines[0])
    assert decisions[:3] == ["warm_start"] * 3 and set(decisions[3:]) <= {"new", "reuse"} and "reuse" in decisions


@pytest.mark.slow
def test_usage_block_progress_is_one_line_per_task_on_stderr(two_runs):
    _, err = two_runs[0]
    assert "\r" not in err  # no progress-bar frames off a terminal
    assert re.findall(r"^\[SDR\] task (\d+): ", err, flags=re.M) == [str(t) for t in range(10)]
    assert re.search(r"^\[pretrain E0\] 20 epochs on 3 warm-start tasks", err, flags=re.M)
    assert "Top1_Acc" not in err and "SDR_Decision" not in err  # no metric dump


def test_recommended_configuration_block_builds_what_it_says():
    """README's recommended-configuration block, run with a backbone and a benchmark."""
    from avalanche_sdr import small_cnn_backbone
    from avalanche_sdr.benchmarks import MixedDigits

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("**Recommended configuration", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    scope = {"backbone": small_cnn_backbone(in_channels=1), "benchmark": MixedDigits(seed=0)}
    exec(compile(code, "README.md (recommended configuration)", "exec"), scope)
    strategy = scope["strategy"]
    assert strategy.sdr.settings.reuse == "accumulate" and strategy.sdr.settings.reuse_guard
    assert strategy.sdr.detector.settings.match_classes and not strategy.model.has_generators
