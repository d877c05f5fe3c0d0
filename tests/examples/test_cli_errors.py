"""Every command-line entry point refuses bad arguments before doing any work, and
reports the library's errors without a traceback.

Each entry point runs as a user runs it (``python examples/<name>.py``, ``python -m
benchmarks.table2`` ...) in a subprocess, from the repository root and with this
checkout on ``PYTHONPATH``. One module-scoped fixture queues them all; they run two at
a time (``conftest.Commands``) and each test waits for its own. An argument error ends
before torch is imported (a fraction of a second, ``tests/examples/test_cli_startup.py``);
the library-error cases import torch and Avalanche first (seconds each).

"Before any work" is checked on what the command did, not on time: the examples get a
``--data-root`` that does not exist, so reading data would have failed with another
error (exit code 1, "not found"); no output file or folder is created; no
pretraining or task line is printed.
"""
import argparse
import json
import os
import subprocess
import sys

import pytest

from avalanche_sdr import cli
from avalanche_sdr.benchmarks.sources import DatasetNotFoundError

EXAMPLES = ("fashion_mnist", "emnist_100", "cifar10_10", "cifar100_40", "fashion_mnist_50")
"""Examples that read a data set (``--data-root``); the quickstart's digits are bundled."""



@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    base = tmp_path_factory.mktemp("cli")
    p = {
        "base": base,
        "missing_root": base / "no_such_data",  # never created
        "folder": base / "a_folder",
        "file": base / "a_file",
        "results": base / "results.json",
    }
    p["folder"].mkdir()
    p["file"].write_text("not a folder\n")
    p["results"].write_text(json.dumps({"tasks": []}))
    checkpoint = base / "bad_checkpoint"
    checkpoint.mkdir()
    (checkpoint / "manifest.json").write_text("{ this is not JSON")
    p["bad_checkpoint"] = checkpoint
    return p


@pytest.fixture(scope="module")
def runs(paths, commands):
    """Every case, started at once; ``runs(name) -> (returncode, stdout, stderr)``."""
    _example = commands.example
    b = paths["base"]
    cases = {
        "quickstart_seed": _example("quickstart") + ["--seed", -1, "--output", b / "qs" / "seed.json"],
        "quickstart_output_is_folder": _example("quickstart") + ["--output", paths["folder"]],
        "quickstart_output_under_file": _example("quickstart") + ["--output", paths["file"] / "out.json"],
        "quickstart_checkpoint_under_file": _example("quickstart") + ["--checkpoint-dir", paths["file"] / "ckpt"],
        "quickstart_bad_checkpoint": _example("quickstart") + ["--checkpoint-dir", paths["bad_checkpoint"],
                                                               "--output", b / "qs_ckpt" / "ckpt.json"],
        "table2_seeds": ["-m", "benchmarks.table2", "--stream", "digits", "--seeds", 0, -1, "--out", b / "t2"],
        "table2_out_is_file": ["-m", "benchmarks.table2", "--stream", "digits", "--out", paths["file"]],
        "sim_seeds": ["-m", "benchmarks.studies.detection.sim", "--stream", "digits", "--seeds", -1, "--out", b / "sim"],
        "sim_out_under_file": ["-m", "benchmarks.studies.detection.sim", "--stream", "digits",
                               "--out", paths["file"] / "sim"],
        "detection_table_missing_source": ["-m", "benchmarks.studies.detection.table", b / "no_such_runs"],
        "plots_out_is_file": ["-m", "avalanche_sdr.plots", paths["results"], "--out", paths["file"]],
        "plots_missing_results": ["-m", "avalanche_sdr.plots", b / "missing.json", "--out", b / "figures"],
        "missing_data_debug": _example("cifar10_10") + ["--data-root", paths["missing_root"], "--debug"],
        "no_filters_on_import": ["-c", (
            "import warnings, avalanche_sdr, avalanche_sdr.cli, avalanche_sdr.training\n"
            "patterns = [f[1].pattern for f in warnings.filters if f[1] is not None]\n"
            "assert not any('QP solver' in p or 'No loggers' in p for p in patterns), patterns\n"
        )],
    }
    for name in EXAMPLES:
        cases[f"{name}_seed"] = _example(name) + [
            "--data-root", paths["missing_root"], "--seed", -1, "--output", b / name / "results.json"]
        cases[f"{name}_output_is_folder"] = _example(name) + [
            "--data-root", paths["missing_root"], "--output", paths["folder"]]
    for name, command in cases.items():
        commands.start(name, command)
    return commands


def _usage_error(result, option):
    code, out, err = result
    assert code == 2, err
    assert "Traceback" not in err, err
    assert f"argument {option}:" in err, err
    # Nothing was loaded or trained: no data error, no pretraining or task line.
    assert "not found" not in err
    assert "[pretrain" not in out and "[SDR]" not in out and "task" not in out
    return err


@pytest.mark.parametrize("name", ("quickstart",) + EXAMPLES)
def test_negative_seed_is_refused_before_any_work(runs, paths, name):
    err = _usage_error(runs(f"{name}_seed"), "--seed")
    assert "-1" in err
    assert not (paths["base"] / ("qs" if name == "quickstart" else name)).exists()


@pytest.mark.parametrize("name", ("quickstart",) + EXAMPLES)
def test_output_that_is_a_folder_is_refused_before_any_work(runs, paths, name):
    err = _usage_error(runs(f"{name}_output_is_folder"), "--output")
    assert "is a folder" in err
    assert list(paths["folder"].iterdir()) == []


def test_output_under_a_file_is_refused(runs, paths):
    err = _usage_error(runs("quickstart_output_under_file"), "--output")
    assert "is a file, not a folder" in err
    err = _usage_error(runs("quickstart_checkpoint_under_file"), "--checkpoint-dir")
    assert "is a file, not a folder" in err
    assert paths["file"].read_text() == "not a folder\n"


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write into read-only folders")
def test_output_in_a_read_only_folder_is_refused(tmp_path, commands):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        done = subprocess.run(
            [sys.executable, str(commands.example("quickstart")[0]), "--output", str(locked / "r.json")],
            cwd=commands.root, env=commands.env(), capture_output=True, text=True, timeout=120,
        )
    finally:
        locked.chmod(0o755)
    err = _usage_error((done.returncode, done.stdout, done.stderr), "--output")
    assert "not writable" in err


def test_harness_refuses_negative_seeds_and_a_file_as_out(runs, paths):
    _usage_error(runs("table2_seeds"), "--seeds")
    assert not (paths["base"] / "t2").exists()  # no E0 pretrained, no run folder
    err = _usage_error(runs("table2_out_is_file"), "--out")
    assert "is not a folder" in err


def test_detection_sim_refuses_negative_seeds_and_an_out_under_a_file(runs, paths):
    _usage_error(runs("sim_seeds"), "--seeds")
    assert not (paths["base"] / "sim").exists()
    _usage_error(runs("sim_out_under_file"), "--out")


def test_detection_table_refuses_a_missing_source(runs):
    err = _usage_error(runs("detection_table_missing_source"), "SOURCE")
    assert "does not exist" in err


def test_plots_refuse_a_file_as_out_and_a_missing_results_file(runs, paths):
    err = _usage_error(runs("plots_out_is_file"), "--out")
    assert "is not a folder" in err
    err = _usage_error(runs("plots_missing_results"), "results")
    assert "does not exist" in err
    assert not (paths["base"] / "figures").exists()


def test_library_error_is_one_message_with_exit_code_1(runs, paths):
    code, out, err = runs("quickstart_bad_checkpoint")
    assert code == 1, err
    assert err.startswith("error: checkpoint manifest") and "Traceback" not in err
    assert "--debug" in err  # says how to see more
    assert "[SDR] task 0" not in out  # refused before the first task
    assert not (paths["base"] / "qs_ckpt").exists()


def test_debug_shows_the_traceback(runs):
    code, out, err = runs("missing_data_debug")
    assert code == 1
    assert "Traceback" in err and "DatasetNotFoundError" in err and "error: CIFAR-10 not found" in err


def test_importing_the_library_installs_no_warning_filter(runs):
    code, out, err = runs("no_filters_on_import")
    assert code == 0, err


# ---------------------------------------------------------------------- in-process
def test_argument_types():
    assert cli.seed("0") == 0 and cli.seed(str(cli.MAX_SEED)) == cli.MAX_SEED
    for bad in ("-1", str(cli.MAX_SEED + 1), "x", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.seed(bad)
    assert cli.positive_int("3") == 3 and cli.non_negative_int("0") == 0
    with pytest.raises(argparse.ArgumentTypeError):
        cli.positive_int("0")
    with pytest.raises(argparse.ArgumentTypeError):
        cli.non_negative_int("-2")
    assert cli.cifar_resnet_depth("/w/resnet32-d509ac18.th") == 32
    with pytest.raises(ValueError, match="resnet<depth>"):
        cli.cifar_resnet_depth("weights.th")


def test_output_paths(tmp_path):
    file = tmp_path / "f.txt"
    file.write_text("x")
    assert cli.output_file(str(tmp_path / "new" / "deeper" / "r.json")).endswith("r.json")
    assert cli.output_file(str(file)) == str(file)  # an existing file is overwritten
    assert cli.output_dir(str(tmp_path)) == str(tmp_path)
    assert cli.output_dir(str(tmp_path / "new" / "folder")) == str(tmp_path / "new" / "folder")
    with pytest.raises(argparse.ArgumentTypeError, match="is a folder"):
        cli.output_file(str(tmp_path))
    with pytest.raises(argparse.ArgumentTypeError, match="is a file, not a folder"):
        cli.output_file(str(file / "r.json"))
    with pytest.raises(argparse.ArgumentTypeError, match="not a folder"):
        cli.output_dir(str(file))
    with pytest.raises(argparse.ArgumentTypeError, match="is a file, not a folder"):
        cli.output_dir(str(file / "sub"))
    with pytest.raises(argparse.ArgumentTypeError, match="empty"):
        cli.output_file("")
    assert not (tmp_path / "new").exists()  # checking creates nothing


def _missing(argv):
    raise DatasetNotFoundError("Toy", "/nowhere", ["/nowhere/a"], "Get it somewhere.")


def test_run_cli_reports_library_errors(capsys, monkeypatch):
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    with pytest.raises(SystemExit) as info:
        cli.run_cli(_missing, argv=[])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: Toy not found under root '/nowhere'") and "Traceback" not in err

    with pytest.raises(SystemExit) as info:
        cli.run_cli(_missing, argv=["--debug"])
    assert info.value.code == 1
    assert "Traceback" in capsys.readouterr().err

    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    with pytest.raises(SystemExit) as info:
        cli.run_cli(_missing, argv=[])
    assert info.value.code == 1
    assert "Traceback" in capsys.readouterr().err


def test_run_cli_keeps_the_traceback_of_a_bug_and_exits_with_main_status(monkeypatch):
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)

    def buggy(argv):
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        cli.run_cli(buggy, argv=[])
    with pytest.raises(SystemExit) as info:
        cli.run_cli(lambda args: 3, parse_args=lambda argv: argv, argv=[])
    assert info.value.code == 3
    with pytest.raises(SystemExit) as info:
        cli.run_cli(lambda args: {"a": 1}, parse_args=lambda argv: argv, argv=[])
    assert info.value.code == 0


def test_legend_and_table_explain_the_output():
    legend = cli.output_legend("agreement", 3)
    for word in ("p = consistency", "S = complexity", "entry", "scored task", "Correct", "Miss", "Incorrect",
                 "G_e"):
        assert word in legend
    assert "power=" in cli.output_legend("two_sample", 3, generators=False)
    assert "G_e" not in cli.output_legend("two_sample", 3, generators=False)
    assert "rel=" in cli.output_legend("expert_gate", 3, generators=False)
    # every detector of the registry explains its own scores (small_task: its fallback too)
    assert "fallback" in cli.output_legend("small_task", 3, generators=False)
    from avalanche_sdr.detection import DETECTOR_TYPES, TwoSampleDetector, TwoSampleSettings

    for rule in DETECTOR_TYPES:
        assert "Tj:" in cli.output_legend(rule, 3, generators=False), rule
    assert "p >= 0.001" in cli.output_legend(TwoSampleDetector(TwoSampleSettings(alpha=0.001)), 3, generators=False)
    results = {
        "tasks": [
            {"task": 0, "group": 1, "split": 0, "decision": "warm_start", "entry": 0, "chosen_task": None,
             "outcome": None, "test_accuracy": 1.0},
            {"task": 1, "group": 1, "split": 1, "decision": "reuse", "entry": 0, "chosen_task": 0,
             "outcome": "correct", "test_accuracy": 0.95},
        ],
        "detection": {"correct": 1.0, "miss": 0.0, "incorrect": 0.0, "n_scored": 1},
        "average_accuracy": 0.975, "memory_mb": 1.0, "memory_mb_all_new": 2.0, "unique_tasks": 1,
    }
    table = cli.results_table(results)
    assert "warm start" in table and "95.0%" in table
    assert "1 correct, 0 miss, 0 incorrect of 1 scored tasks" in table
