"""Every command line answers ``--help`` and refuses bad arguments before it imports
anything heavy, and its ``--help`` shows no reStructuredText markup.

Checked on what the command imported, not on time (``python -m benchmarks.studies.where_the_time_goes.cli_startup``
measures the seconds and megabytes): each entry point of
:data:`benchmarks.studies.where_the_time_goes.cli_startup.ENTRY_POINTS` runs, as ``python examples/<name>.py`` or
``python -m <module>`` would run it, inside a small probe process that then lists
the top-level packages in ``sys.modules``. One process at a time, ~0.2 s each.
"""
import json
import os
import subprocess
import sys

import pytest

from avalanche_sdr import cli
from benchmarks.studies.where_the_time_goes.cli_startup import ENTRY_POINTS, HEAVY_MODULES, REPO_ROOT, command_env

PROBE = r"""
import json, runpy, sys
target, *arguments = sys.argv[1:]
sys.argv = [target, *arguments]
try:
    if target.endswith(".py"):
        runpy.run_path(target, run_name="__main__")
    else:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    code = 0
except SystemExit as exit:
    code = exit.code
sys.stdout.flush()
print("\nPROBE " + json.dumps({"code": code, "modules": sorted({m.split(".")[0] for m in sys.modules})}),
      file=sys.stderr)
"""
"""Runs a command in this process, then prints its exit code and the top-level
packages it imported on the last line of stderr."""


def probe(entry, arguments):
    """``(exit code, stdout, stderr without the probe line, imported heavy packages)``."""
    env = command_env()
    target = entry.target
    if entry.is_script:  # its folder first on the import path, as for "python examples/<name>.py"
        target = str(REPO_ROOT / entry.target)
        env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(target), env["PYTHONPATH"]])
    done = subprocess.run([sys.executable, "-c", PROBE, target, *arguments], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    err, _, line = done.stderr.rstrip("\n").rpartition("\n")
    assert line.startswith("PROBE "), done.stderr
    report = json.loads(line[len("PROBE "):])
    return report["code"], done.stdout, err, sorted(set(report["modules"]) & set(HEAVY_MODULES))


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=[e.name for e in ENTRY_POINTS])
def test_help_and_usage_errors_come_before_heavy_imports(entry):
    code, out, err, heavy = probe(entry, ["--help"])
    assert code == 0, err
    assert out.startswith("usage: ") and "--help" in out
    assert heavy == [], f"{entry.target} --help imported {heavy}"
    assert "``" not in out and ":func:`" not in out and ":mod:`" not in out, out

    code, out, err, heavy = probe(entry, entry.bad_arguments)
    assert code == 2, err
    assert "error: " in err and "Traceback" not in err, err
    assert heavy == [], f"{entry.target} {' '.join(entry.bad_arguments)} imported {heavy}"


def test_the_probe_sees_heavy_imports(tmp_path):
    """The check above can fail: a command that imports a heavy package (here scipy)
    before parsing is reported."""
    from benchmarks.studies.where_the_time_goes.cli_startup import EntryPoint

    script = tmp_path / "heavy_command.py"
    script.write_text("import argparse\nimport scipy\nargparse.ArgumentParser().parse_args()\n")
    code, out, err, heavy = probe(EntryPoint("heavy", str(script), ()), ["--help"])
    assert code == 0, err
    assert heavy == ["scipy"]


def test_plain_text_and_description():
    assert cli.plain_text("SDR on ``MixedEMNIST`` (:func:`~avalanche_sdr.cli.seed`, :mod:`avalanche_sdr.cli`, "
                          ":ref:`the data <data>`, `x`)::") == \
        "SDR on MixedEMNIST (seed, avalanche_sdr.cli, the data, x):"
    assert cli.plain_text("a :class:`~x.Y`\n``b``") == "a Y\nb"
    doc = """The task-free table (issue #15): ``SDR``'s routers
    against baselines.

    More text with ``markup``.
    """
    assert cli.description(doc) == "The task-free table (issue #15): SDR's routers against baselines."
    assert cli.description(None) == ""
