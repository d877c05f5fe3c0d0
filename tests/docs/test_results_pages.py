"""The results pages under ``docs/results/`` are reports, not diaries.

- No Markdown file under ``docs/results/`` names a path of a developer's machine (an
  absolute ``/work/``, ``/root/``, ``/home/``, ``/tmp/`` or ``/Users/`` folder, or the
  ``../shared/`` folder beside a checkout): a reader has neither; commands take
  placeholders (``EMNIST_ROOT``, ``OUT``) and say where the data come from.
- None of them tells who ran what when: no work session, no clock time of a run, no
  "today", no other agents' or helpers' processes. Setup is stated as a commit, the
  machine, the torch threads and the load; history is git's.
- Every report page directly in ``docs/results/`` (all but the index ``README.md``)
  states its question, its setup with threads and load, a command that produced it,
  and a conclusion.
- No Python file lives under ``docs/`` but Sphinx's ``conf.py``: evidence scripts are
  modules under ``benchmarks/`` (where the source-tree rules and their tests reach them).

Run-file outputs (JSON, CSV, logs) are what the commands wrote and are not checked here.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RESULTS = DOCS / "results"

DEVELOPER_PATH = re.compile(r"(?<![\w.~-])/(?:work|root|home|tmp|Users)/|(?<![\w.])\.\./shared/")
# A small, precise list: each pattern names a narrative of the work, never a result.
DIARY = {
    "a work session": re.compile(r"\bsessions?\b", re.I),
    "a clock time of a run": re.compile(
        r"\b(?:[01]?\d|2[0-3]):[0-5]\d(?::[0-5]\d)? UTC\b|\b(?:[01]\d|2[0-3]):[0-5]\d-(?:[01]\d|2[0-3]):[0-5]\d\b"),
    "'today'": re.compile(r"\btoday\b", re.I),
    "other agents or helpers": re.compile(r"\b(?:agents?|helpers?)(?:'|'s)? (?:processes|runs|work)\b|\bother agents\b"
                                          r"|\bhelper agents?\b|\bH[1-9]'s\b", re.I),
}
REPORT_PARTS = {
    "question": re.compile(r"\bQuestion\b"),
    "setup": re.compile(r"\bsetup\b", re.I),
    "torch threads": re.compile(r"\bthreads?\b", re.I),
    "load": re.compile(r"\bload\b", re.I),
    "a command": re.compile(r"python (?:-m |examples/)"),
    "conclusion": re.compile(r"\bConclusion\b"),
}


def markdown_pages():
    return sorted(RESULTS.rglob("*.md"))


def report_pages():
    return sorted(p for p in RESULTS.glob("*.md") if p.name != "README.md")


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def test_results_pages_are_there():
    assert len(markdown_pages()) >= 20 and len(report_pages()) >= 10, "docs/results/ lost its pages"


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda p: str(p.relative_to(RESULTS)))
def test_results_page_names_no_path_of_a_developers_machine(page):
    text = page.read_text(encoding="utf-8")
    found = [f"line {line_of(text, m.start())}: {m.group(0)!r}" for m in DEVELOPER_PATH.finditer(text)]
    assert not found, (f"{page.relative_to(ROOT)} names folders of a developer's machine ({', '.join(found)}): "
                       "write a placeholder (EMNIST_ROOT, OUT, DIR) and say where the data come from (docs/data.rst)")


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda p: str(p.relative_to(RESULTS)))
def test_results_page_tells_no_history_of_its_runs(page):
    text = page.read_text(encoding="utf-8")
    found = [f"{what} at line {line_of(text, m.start())} ({m.group(0)!r})"
             for what, pattern in DIARY.items() for m in pattern.finditer(text)]
    assert not found, (f"{page.relative_to(ROOT)} narrates who ran what when: {'; '.join(found)}. State the "
                       "setup (commit, machine, threads, load) instead; the history is in git")


@pytest.mark.parametrize("page", report_pages(), ids=lambda p: p.name)
def test_results_page_is_a_report(page):
    text = page.read_text(encoding="utf-8")
    missing = [part for part, pattern in REPORT_PARTS.items() if not pattern.search(text)]
    assert not missing, (f"{page.relative_to(ROOT)} lacks {', '.join(missing)}: a results page states its question, "
                         "setup (commit, machine, threads, load), command, tables and conclusion")


def test_the_patterns_catch_what_they_are_for():
    """Each rule fails on the text it exists for and passes a legitimate sentence."""
    assert DEVELOPER_PATH.search("python /work/shared/data/make_emnist_root.py EMNIST_ROOT")
    assert DEVELOPER_PATH.search("--backbones /tmp/sl_e0") and DEVELOPER_PATH.search("`../shared/data/cifar10/`")
    assert not DEVELOPER_PATH.search("`docs/results/task_free/<stream>/` and ../../benchmarks/studies/")
    narrative = {"a work session": "run a session later with the same code",
                 "a clock time of a run": "28 Nov 2026, 09:36-10:28 UTC",
                 "'today'": "today's default", "other agents or helpers": "shared with 5 other agents"}
    for what, sentence in narrative.items():
        assert DIARY[what].search(sentence), what
    legitimate = ("Wall time 1 min 51 s, 3:02.7 wall, load 0.4 -> 1.0; H0 rejected at alpha 0.01; "
                  "a helper function; the run's set-up (together 4.1 s)")
    assert not any(pattern.search(legitimate) for pattern in DIARY.values())


def test_no_python_file_under_docs():
    """Needs the evidence scripts of docs/results/where_the_time_goes/ moved into benchmarks/."""
    found = sorted(str(p.relative_to(ROOT)) for p in DOCS.rglob("*.py")
                   if p != DOCS / "conf.py" and "_build" not in p.relative_to(DOCS).parts)
    assert not found, (f"Python files under docs/: {found}; a script that produces evidence is a module under "
                       "benchmarks/ (run with python -m from the repository root), its output stays in docs/results/")
