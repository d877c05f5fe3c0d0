"""Rules over the whole source tree that a reviewer would otherwise check by hand.

- No Python file edits ``sys.path``: the package, the benchmarks, the examples, the
  tests and the Sphinx configuration import what is installed (``pip install -e .``)
  or what ``python -m`` finds from the repository root.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = {".git", "build", "_build", "results", ".eggs"}
EDIT = re.compile(r"\bsys\.path\s*(\.\s*(insert|append|extend|remove|pop|clear)\b|\[[^\]]*\]\s*=|\s*[+]?=(?!=))")


def _python_files():
    for path in ROOT.rglob("*.py"):
        parts = set(path.relative_to(ROOT).parts)
        if not parts & SKIP and not any(p.endswith(".egg-info") for p in parts):
            yield path


def test_the_pattern_finds_each_way_of_editing_sys_path():
    edits = ["sys.path.insert(0, ROOT)", "sys.path.append('x')", "sys.path = ['x']", "sys.path += ['x']",
             "sys.path[:0] = ['x']", "sys.path .extend(['x'])"]
    reads = ["print(sys.path)", "if sys.path == []:", "x = list(sys.path)", "# see sys.path_hooks"]
    assert all(EDIT.search(line) for line in edits)
    assert not any(EDIT.search(line) for line in reads)


def test_no_python_file_edits_sys_path():
    files = list(_python_files())
    assert any(p.name == "conf.py" for p in files) and len(files) > 50
    offenders = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in files
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                 if EDIT.search(line) and p != Path(__file__).resolve()]
    assert not offenders, "edit of sys.path (install the package instead):\n" + "\n".join(offenders)
