"""docs/glossary.rst defines the words a newcomer meets in the README, the commands'
output and the results tables without a definition nearby."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

REQUIRED = ("EFT", "ELBO", "NTK", "E0", "warm start", "Optimal", "ER", "DGR", "PNN", "Expert Gate", "[tuned]",
            "HAT", "EWC, Online EWC", "entry", "head", "Correct, Miss, Incorrect", "group, split", "task-aware, task-free")


def glossary_terms():
    """The terms of the page's ``.. glossary::`` (lines indented by exactly 3 spaces)."""
    text = (ROOT / "docs" / "glossary.rst").read_text(encoding="utf-8")
    body = text.split(".. glossary::", 1)[1]
    return [line.strip() for line in body.splitlines() if re.match(r"^   \S", line) and not line.strip().startswith(":")]


def test_glossary_defines_the_words_newcomers_asked_about():
    terms = glossary_terms()
    missing = [word for word in REQUIRED if word not in terms]
    assert not missing, f"docs/glossary.rst lacks {missing}"
    assert len(terms) == len(set(terms)), "a term is defined twice"


def test_readme_and_docs_index_point_to_the_glossary():
    assert "docs/glossary.rst" in (ROOT / "README.md").read_text(encoding="utf-8")
    index = (ROOT / "docs" / "index.rst").read_text(encoding="utf-8")
    assert ":ref:`glossary`" in index and re.search(r"^   glossary$", index, flags=re.M)
