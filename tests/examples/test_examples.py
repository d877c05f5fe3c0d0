"""The paper-stream examples as a user runs them: ``python examples/<name>.py`` from the
repository root, in subprocesses.

A command that reads data imports torch and Avalanche first (~10 s on a loaded 2-core
machine). Module-scoped fixtures queue the commands; they run two at a time
(``conftest.Commands``) and each test waits for its own. The two training runs are
marked ``slow`` (``-m "not slow"`` leaves them out and never starts them); the whole
module took 100 s at load 3-5 on 2 cores.
"""
import json
from pathlib import Path

import pytest

MISSING = {
    "emnist_100": "EMNIST (balanced) not found",
    "cifar10_10": "CIFAR-10 not found",
    "cifar100_40": "CIFAR-100 not found",
    "fashion_mnist_50": "Fashion-MNIST not found",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, commands):
    """The quick commands (missing data, a usage error), queued (two run at once);
    ``runs(name) -> (returncode, stdout, stderr)``."""
    empty = tmp_path_factory.mktemp("empty_root")
    example = commands.example
    for name in MISSING:
        commands.start(name, example(name) + ["--data-root", empty])
    commands.start("reads_no_generators", example("fashion_mnist_50") + ["--data-root", empty, "--method",
                                                                         "recommended", "--vae-epochs", "3"])
    return commands


@pytest.fixture(scope="module")
def training_runs(tmp_path_factory, commands, write_emnist_root, fake_emnist):
    """The two training runs on fake EMNIST, queued together when the first ``slow``
    test asks (never when those tests are deselected); ``training_runs(name)`` as
    :func:`runs`, plus ``.output`` and ``.recommended_output`` (their results JSONs)."""
    fake = tmp_path_factory.mktemp("fake_emnist")
    # bymerge: per-task sizes scale to the handful of images a class (balanced would
    # demand the paper's 2,400 a class).
    write_emnist_root(fake, "bymerge", *fake_emnist(per_class_train=60, per_class_test=20, seed=0))
    example = commands.example
    commands.start("smoke", example("emnist_100") + [
        "--data-root", fake, "--split", "bymerge", "--max-tasks", 4, "--preset", "cpu",
        "--pretrain-epochs", 1, "--new-task-epochs", 1, "--vae-epochs", 1, "--compare",
        "--output", fake / "results.json",
    ])
    commands.start("recommended", example("emnist_100") + [
        "--data-root", fake, "--split", "bymerge", "--max-tasks", 5, "--task-sizes", "capped",
        "--pretrain-epochs", 1, "--new-task-epochs", 1, "--method", "recommended",
        "--output", fake / "recommended.json",
    ])
    commands.output = fake / "results.json"
    commands.recommended_output = fake / "recommended.json"
    return commands


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(MISSING))
def test_missing_data_exits_1_with_the_loader_message(runs, script):
    code, out, err = runs(script)
    assert code == 1, err
    assert err.startswith("error: ") and MISSING[script] in err
    assert "Missing files:" in err
    assert "Traceback" not in err
    if script == "emnist_100":  # the paper's split; offline, the message names bymerge
        assert "Without internet, use EMNIST bymerge: --split bymerge" in err


@pytest.mark.slow
def test_emnist_smoke_run_compares_with_ewc_and_replay(training_runs):
    """An end-to-end training run: 4 tasks of fake EMNIST, SDR then online EWC and
    Replay, one epoch each. Cost: ~35 s (one thread, 2 cores at load 3)."""
    code, out, err = training_runs("smoke")
    assert code == 0, err
    results = json.loads(Path(training_runs.output).read_text())
    assert len(results["tasks"]) == 4
    assert results["config"]["max_tasks"] == 4
    assert (results["config"]["method"], results["config"]["detector"]) == ("paper", "agreement")
    assert results["config"]["strategy"]["reuse"]["name"] == "head" and results["config"]["generator"] == "independent"
    assert [t["decision"] for t in results["tasks"][:3]] == ["warm_start"] * 3
    assert set(results["baselines"]) == {"ewc", "replay"}
    for row in [results] + list(results["baselines"].values()):
        assert 0.0 <= row["average_accuracy"] <= 1.0
        assert row["memory_mb"] > 0
    for label in ("SDR (agreement, head reuse)", "Online EWC", "ER"):
        assert label in out
    assert "How to read the lines below" in out and "reused task" in out  # legend, final table
    assert "only a new" in out and "entry updated" not in out  # the paper's head-only reuse
    assert results["config"]["torch_threads"] == 1
    assert "No loggers specified" not in err and "no QP solver" not in err


@pytest.mark.slow
def test_recommended_method_runs_by_name_on_the_harness_task_sizes(training_runs):
    """An end-to-end training run: 5 tasks of fake EMNIST, ``--method recommended`` on the
    harness's capped task sizes. Cost: ~40 s (one thread, 2 cores at load 3)."""
    code, out, err = training_runs("recommended")
    assert code == 0, err
    results = json.loads(Path(training_runs.recommended_output).read_text())
    config = results["config"]
    assert (config["method"], config["detector"], config["generator"]) == ("recommended", "small_task", "none")
    assert config["strategy"]["reuse"]["name"] == "accumulate" and config["strategy"]["detector"]["two_sample"]["match_classes"]
    assert [router["name"] for router in config["strategy"]["routers"]] == ["lda_weighted"]
    assert config["options"]["task_sizes"] == "capped"
    assert max(size["train"] for size in config["task_sizes"]) <= 200  # the harness's emnist100 caps
    scored = [t["detection"] for t in results["tasks"][3:]]
    assert scored and all(d["rule"] == "small_task" for d in scored)
    assert "entry updated" in out and "only a new" not in out  # the legend of the learning reuse
    assert "SDR (small_task, accumulate reuse)" in out


def test_vae_epochs_for_a_detector_that_reads_no_generators_is_a_usage_error(runs):
    code, out, err = runs("reads_no_generators")
    assert code == 2
    assert "--vae-epochs: the detector small_task (of --method recommended) reads no generators" in err
    assert "Traceback" not in err
    assert "not found" not in err  # refused before any data is read
