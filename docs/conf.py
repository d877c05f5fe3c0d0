"""Sphinx configuration of the avalanche-sdr documentation.

Build (from the repository root, with the ``docs`` extra installed)::

    pip install -e ".[docs]"
    python -m sphinx -W -b html docs docs/_build/html

Offline by design: no intersphinx, the default theme (alabaster), math rendered by
MathJax in the reader's browser. Autodoc imports the package (and so Avalanche and
torch): the package must be importable, e.g. installed with ``pip install -e .`` (this
file leaves ``sys.path`` alone; ``python -m sphinx`` run from the repository root also
finds the checkout's package first).
"""
from __future__ import annotations

import configparser
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent

_setup = configparser.ConfigParser()
_setup.read(ROOT / "setup.cfg", encoding="utf-8")

project = "avalanche-sdr"
author = "the avalanche-sdr developers"
copyright = "the avalanche-sdr developers, MIT licence"
release = _setup.get("metadata", "version", fallback="unknown")
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
# reliability.md is written by the reliability work and pulled into
# reliability_page.rst with an include; docs/results/ and docs/images/ hold files
# that reproducing.rst pulls in with the sdr-results directive below. None of them is
# a page of its own.
exclude_patterns = ["_build", "build", "reliability.md", "results/**", "images/**", "**/.ipynb_checkpoints"]

# Autodoc: members in source order, signatures with type hints, no private names.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_inherit_docstrings = False
# Warnings are errors (-W); unresolvable cross-references to third-party objects
# (torch, Avalanche) are not warnings unless nitpicky is on, and it stays off.
nitpicky = False
# Relative Markdown links in the included Markdown files (reliability.md,
# results/*.md) to files outside docs/ (e.g. ../examples/quickstart.py) have no
# Sphinx target; they render as plain text instead of failing the build.
suppress_warnings = ["myst.xref_missing"]

myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3

html_theme = "alabaster"
html_title = f"avalanche-sdr {release}"
html_theme_options = {
    "description": "Similar-task Detection and Repurposing for Avalanche",
    "fixed_sidebar": True,
}
html_static_path: list = []
templates_path: list = []
pygments_style = "sphinx"


class ResultsFiles(Directive):
    """``.. sdr-results::`` — the results tables and figures under docs/results/ and docs/images/.

    Inserts, in file-name order, the files directly in ``docs/results/``: ``*.md``
    (parsed as Markdown), ``*.rst`` (included) and ``*.csv`` (a ``csv-table`` with a
    header row); then every ``*.png`` / ``*.svg`` under ``docs/images/`` (sub-folders
    included, in path order) as an image under its path. Files in sub-folders of
    docs/results/ (run outputs: JSON, logs, long CSVs) are left to the Markdown
    files that describe them. With nothing to show it says so in one paragraph, so
    the page builds before any result is committed.
    """

    has_content = False

    def run(self):
        results_dir, images_dir = DOCS / "results", DOCS / "images"
        results = sorted(p for p in results_dir.iterdir() if p.is_file()) if results_dir.is_dir() else []
        images = sorted(images_dir.rglob("*")) if images_dir.is_dir() else []
        lines: list[str] = []
        for path in results:
            rel = f"results/{path.name}"
            if path.suffix == ".md":
                lines += [f".. include:: {rel}", "   :parser: myst_parser.sphinx_", ""]
            elif path.suffix == ".rst":
                lines += [f".. include:: {rel}", ""]
            elif path.suffix == ".csv":
                lines += [f".. csv-table:: ``docs/{rel}``", f"   :file: {rel}", "   :header-rows: 1", ""]
        figures = [p for p in images if p.is_file() and p.suffix in (".png", ".svg")]
        if figures:
            lines += ["Figures in ``docs/images/``:", ""]
        for path in figures:
            rel = path.relative_to(DOCS).as_posix()
            lines += [f"``docs/{rel}``", "", f".. image:: {rel}", "   :width: 90%", ""]
        if not lines:
            para = nodes.paragraph(
                text="No results files are committed under docs/results/ or docs/images/ yet: "
                "there is no results table to show."
            )
            return [para]
        # Paths are relative to docs/, where reproducing.rst (the including page) lives.
        self.state_machine.insert_input(lines, str(DOCS / "reproducing.rst"))
        return []


def _always_reread_reproducing(app, env, added, changed, removed):
    # The page lists whatever files docs/results/ and docs/images/ hold now.
    return ["reproducing"] if "reproducing" in env.found_docs else []


def setup(app):
    app.add_directive("sdr-results", ResultsFiles)
    app.connect("env-get-outdated", _always_reread_reproducing)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
