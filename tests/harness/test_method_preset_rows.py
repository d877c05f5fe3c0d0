"""The rows ``sdr_paper`` and ``sdr_recommended`` of ``python -m benchmarks.table2``: the
library's method presets exactly (``SDRStrategy.from_benchmark(..., method=NAME)``), and
the harness's one word for its rows, ``--methods`` (no ``--method`` beside it).

Fast: the parser's rows and refusals, a faked call (runs replaced by an in-process fake
that records what it is asked to run) and the rows' strategies against the strategy a
user builds with ``method=NAME``.
"""
import copy
import subprocess
import sys

import pytest

from avalanche_sdr import training
from benchmarks.studies.where_the_time_goes.cli_startup import REPO_ROOT, command_env
from benchmarks.table2 import catalogue
from benchmarks.table2 import command as table2
from benchmarks.table2.methods import METHODS, PRESETS, STREAMS
from benchmarks.table2.variants import Row, harness_variant_rows

PRESET_ROWS = {entry.method_preset: name for name, entry in catalogue.METHODS.items() if entry.method_preset}
"""Library method preset -> its harness row."""


def _rows(argv):
    return harness_variant_rows(table2.parse_args(argv))


def test_every_library_preset_has_its_row():
    assert set(PRESET_ROWS) == set(training.METHODS)
    assert PRESET_ROWS == {"paper": "sdr_paper", "recommended": "sdr_recommended"}
    assert catalogue.METHODS["sdr_recommended"].task_free  # the preset predicts without task labels
    assert all(not catalogue.METHODS[row].takes_reuse and not catalogue.METHODS[row].default
               for row in PRESET_ROWS.values())


def test_help_lists_the_rows_and_no_method_option():
    done = subprocess.run([sys.executable, "-m", "benchmarks.table2", "--help"], cwd=REPO_ROOT, env=command_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--methods METHOD [METHOD ...]" in done.stdout and "--method NAME" not in done.stdout
    for row in PRESET_ROWS.values():
        assert f"\n  {row:<21} {catalogue.METHODS[row].label}" in done.stdout, row


def test_the_preset_rows_take_no_reuse_and_are_not_in_the_default_call(tmp_path):
    out = ["--out", str(tmp_path)]
    assert _rows(["--methods", "sdr_paper", "sdr_recommended"] + out) == [Row("sdr_paper"), Row("sdr_recommended")]
    # --reuse acts on the rows the harness configures only; the presets keep their own.
    assert _rows(["--methods", "sdr_two_sample_nogen", "sdr_recommended", "--reuse", "head", "accumulate"] + out) == [
        Row("sdr_two_sample_nogen"), Row("sdr_two_sample_nogen", "accumulate", (("reuse", "accumulate"),)),
        Row("sdr_recommended")]
    # --sweep: the EFT sizes, which the preset rows take.
    assert _rows(["--methods", "sdr_recommended", "--sweep"] + out) == [
        Row("sdr_recommended"), Row("sdr_recommended", "a4b8", (("a", 4), ("b", 8))),
        Row("sdr_recommended", "a16b32", (("a", 16), ("b", 32)))]
    args = table2.parse_args(out)
    assert args.methods == list(catalogue.DEFAULT_METHODS) and args.reuse == ["head"]
    assert set(catalogue.METHODS) - set(args.methods) == set(PRESET_ROWS.values())


@pytest.mark.parametrize("argv, message", [
    (["--method", "paper"], "invalid choice: 'paper'"),  # --method is --methods' prefix: no preset name there
    (["--methods", "sdr_recommended", "--reuse", "accumulate"], "--reuse: no SDR row in --methods"),
    (["--methods", "replay", "ewc", "--reuse", "accumulate"], "--reuse: no SDR row in --methods"),
    (["--methods", "sdr_recommended", "--update-rollback", "off"], "no learning-reuse row in this call"),
    (["--methods", "ewc", "--sweep"], "--sweep: none of --methods has memory-knob variants"),
    (["--methods", "replay", "--equal-memory", "sdr_recommended"], "a reference must also be in --methods"),
])
def test_inconsistent_combinations_are_refused(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as err:
        table2.parse_args(argv + ["--out", str(tmp_path)])
    assert err.value.code == 2 and message in capsys.readouterr().err


def _fake_result(spec):
    return {"run_id": spec.run_id, "method": spec.method, "variant": spec.variant, "options": dict(spec.options),
            "label": METHODS[spec.method].label + (f" [{spec.variant}]" if spec.variant else ""),
            "stream": spec.stream, "stream_label": "MixedDigits (10 tasks)", "preset": spec.preset,
            "seed": spec.seed, "split": spec.split, "average_accuracy": 0.5, "task_accuracies": [0.5],
            "memory_mb": 1.0, "detection": None, "wall_seconds": 1.0, "evaluation_seconds": 0.0}


def test_a_call_runs_the_preset_rows_it_names(faked_runs, tmp_path):
    ran = faked_runs(_fake_result)
    (tmp_path / "backbones").mkdir()
    (tmp_path / "backbones" / "digits_smoke_seed0.pt").write_bytes(b"")  # E0 exists: nothing is pretrained
    table = table2.main(table2.parse_args(["--stream", "digits", "--preset", "smoke", "--seeds", "0", "--no-plots",
                                           "--methods", "sdr_paper", "sdr_recommended", "replay",
                                           "--out", str(tmp_path)]))
    assert sorted(s.run_id for s in ran) == ["digits_smoke_replay_seed0", "digits_smoke_sdr_paper_seed0",
                                             "digits_smoke_sdr_recommended_seed0"]
    for row in PRESET_ROWS.values():
        assert f"| {catalogue.METHODS[row].label} |" in table


def _built(row, options=()):
    """The harness row's strategy on digits (smoke preset) and the digits stream it was built on."""
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr.models import small_cnn_backbone

    stream = STREAMS["digits"]
    benchmark = stream.build(0, PRESETS["smoke"].capped, original_class_ids=METHODS[row].task_free)
    backbone = small_cnn_backbone(in_channels=1, widths=(8, 8))
    strategy = METHODS[row].build(backbone, benchmark, stream, PRESETS["smoke"], device="cpu",
                                  evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]),
                                  **dict(options))
    return strategy, benchmark, backbone


@pytest.mark.parametrize("name", sorted(training.METHODS))
def test_each_preset_row_is_the_strategy_a_user_gets(name):
    """The row's strategy and ``SDRStrategy.from_benchmark(E0, benchmark, method=name,
    settings=...)`` have the same configuration (every setting, detector, routers and
    repository that a checkpoint compares); the harness adds only the VAE sizes of the
    stream (read by the paper's generators), never a method setting."""
    from avalanche_sdr import SDRStrategy
    from avalanche_sdr.training.checkpoint import repository_fingerprint, strategy_fingerprint

    strategy, benchmark, backbone = _built(PRESET_ROWS[name])
    stream = STREAMS["digits"]
    sizes = {"latent_dim": stream.latent_dim, "vae_width": stream.vae_width} if strategy.model.has_generators else {}
    user = SDRStrategy.from_benchmark(copy.deepcopy(backbone), benchmark, method=name,
                                      settings=PRESETS["smoke"].sdr, **sizes)
    assert strategy.method == user.method == name
    assert strategy_fingerprint(strategy) == strategy_fingerprint(user)
    assert repository_fingerprint(strategy.model) == repository_fingerprint(user.model)
    expected = training.METHODS[name]
    assert strategy.sdr.reuse.name == expected.reuse and strategy.sdr.reuse == user.sdr.reuse
    assert [r.config() for r in strategy.sdr.routers] == [r.config() for r in user.sdr.routers] and \
        len(strategy.sdr.routers) == len(expected.routers)


def test_the_recommended_row_differs_from_the_rows_the_results_pages_measured():
    """``sdr_two_sample_nogen [accumulate]`` (the committed results' row) tests classes in the
    stream's order at the fixed level; ``sdr_recommended`` is the library's preset: the
    small-task rule, its two-sample stage matching them in any order at the level by size paired with the
    entry's reference."""
    recommended, _, _ = _built("sdr_recommended")
    measured, _, _ = _built("sdr_two_sample_nogen", (("reuse", "accumulate"),))
    assert recommended.sdr.detector.rule == "small_task"
    assert recommended.sdr.detector.settings.two_sample.match_classes is True
    assert recommended.sdr.detector.settings.two_sample.alpha.name == "by_paired_power"
    assert measured.sdr.detector.settings.alpha == 0.01
    assert measured.sdr.detector.settings.match_classes is False
    assert recommended.sdr.reuse == measured.sdr.reuse == training.LearningReuse()


def test_a_preset_row_refuses_a_method_setting():
    with pytest.raises(TypeError, match="takes the library's own defaults"):
        _built("sdr_recommended", (("reuse", "head"),))


@pytest.mark.slow
def test_the_preset_rows_run_the_whole_smoke_stream(tmp_path):
    """Both rows through the engine on digits (smoke): the recommended preset's run is
    scored task-free with its own router, and sized to by an --equal-memory row."""
    import json

    out = tmp_path / "presets"
    table2.main(table2.parse_args(["--stream", "digits", "--preset", "smoke", "--seeds", "0", "--no-plots",
                                   "--methods", "sdr_paper", "sdr_recommended", "ci_replay",
                                   "--equal-memory", "sdr_recommended", "--out", str(out)]))
    runs = {r["run_id"]: r for r in json.loads((out / "runs.json").read_text())}
    assert set(runs) == {"digits_smoke_sdr_paper_seed0", "digits_smoke_sdr_recommended_seed0",
                         "digits_smoke_ci_replay_seed0", "digits_smoke_ci_replay_mem_sdr_recommended_seed0"}
    recommended = runs["digits_smoke_sdr_recommended_seed0"]
    assert set(recommended["task_free"]) == {"lda_weighted", "oracle"}
    assert set(recommended["router_memory_mb"]) == {"lda_weighted"} and recommended["lda_weight"] is not None
    assert len(recommended["detection"]["decisions"]) == 10 and "task_free" not in runs["digits_smoke_sdr_paper_seed0"]


def test_the_task_free_study_reads_the_rows_the_harness_configures_only(tmp_path):
    """``sdr_recommended`` scores one router: the task-free table (every router of
    ``sdr_task_free``) passes over its runs instead of refusing them as incomplete."""
    import json

    from benchmarks.studies.task_free import table as task_free

    assert "sdr_recommended" not in task_free.TASK_FREE_METHODS and "sdr_task_free" in task_free.TASK_FREE_METHODS
    (tmp_path / "runs").mkdir()
    run = {"run_id": "digits_smoke_sdr_recommended_seed0", "method": "sdr_recommended", "split": "test",
           "task_free": {"lda_weighted": {"task_free": 0.9, "routing": 0.9}}}
    (tmp_path / "runs" / f"{run['run_id']}.json").write_text(json.dumps(run))
    with pytest.raises(task_free.TaskFreeReportError, match="no run of a task-free method"):
        task_free.load_task_free_runs([tmp_path])
