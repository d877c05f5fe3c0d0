"""``python -m benchmarks.table2 --method NAME``: the SDR rows of the library's method presets.

Fast: the parser's rows and refusals, a faked call (runs replaced by an in-process fake
that records what it is asked to run) and the rows' builders against the library's
presets (``avalanche_sdr.training.METHODS``).
"""
import dataclasses
import subprocess
import sys

import pytest

from avalanche_sdr import training
from benchmarks.table2 import catalogue
from benchmarks.table2 import command as table2
from benchmarks.studies.where_the_time_goes.cli_startup import REPO_ROOT, command_env
from benchmarks.table2 import executors
from benchmarks.table2.methods import METHODS
from benchmarks.table2.variants import Row, harness_variant_rows

ACCUMULATE = (("reuse", "accumulate"),)


def _rows(argv):
    return harness_variant_rows(table2.parse_args(argv))


def test_help_lists_the_method_option_and_the_presets():
    done = subprocess.run([sys.executable, "-m", "benchmarks.table2", "--help"], cwd=REPO_ROOT, env=command_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--method NAME [NAME ...]" in done.stdout
    assert "method presets (--method; the library's SDRStrategy(method=NAME)):" in done.stdout
    for name in catalogue.METHOD_PRESETS:
        assert f"\n  {name:<21} " in done.stdout, name


def test_method_adds_the_rows_of_each_preset(tmp_path):
    out = ["--out", str(tmp_path)]
    # Alone: the preset's rows only (--methods defaults to none with --method).
    assert _rows(["--method", "paper"] + out) == [Row("sdr")]
    assert _rows(["--method", "recommended"] + out) == [Row("sdr_two_sample_nogen", "accumulate", ACCUMULATE)]
    assert _rows(["--method", "paper", "recommended"] + out) == [
        Row("sdr"), Row("sdr_two_sample_nogen", "accumulate", ACCUMULATE)]
    # Beside --methods; a row --methods already has is not repeated.
    assert _rows(["--methods", "replay", "sdr", "--method", "paper"] + out) == [Row("replay"), Row("sdr")]
    assert _rows(["--methods", "sdr_two_sample_nogen", "--reuse", "head", "accumulate", "--method", "recommended"]
                 + out) == [Row("sdr_two_sample_nogen"), Row("sdr_two_sample_nogen", "accumulate", ACCUMULATE)]
    # With a task-free row in --methods, the recommended preset's task-free row too.
    assert _rows(["--methods", "ci_replay", "--method", "recommended"] + out) == [
        Row("ci_replay"), Row("sdr_two_sample_nogen", "accumulate", ACCUMULATE),
        Row("sdr_task_free", "accumulate", ACCUMULATE)]
    # Without --method nothing changes: every method, head-only reuse.
    args = table2.parse_args(out)
    assert args.methods == list(catalogue.METHODS) and args.reuse == ["head"] and args.method == []


@pytest.mark.parametrize("argv, message", [
    (["--method", "paper", "--methods", "ci_replay"], "--method paper: the harness has no task-free row"),
    (["--method", "recommended", "--reuse", "accumulate"], "--reuse: no SDR row in --methods"),
    (["--methods", "replay", "ewc", "--reuse", "accumulate"], "--reuse: no SDR row in --methods"),
    (["--method", "paper", "--sweep"], "--sweep: none of --methods has memory-knob variants"),
    (["--method", "fast"], "argument --method: invalid choice: 'fast'"),
    (["--method", "paper", "--methods", "replay", "--equal-memory", "sdr_two_sample_nogen"],
     "a reference must also be in --methods (or be a row of --method)"),
    (["--method", "recommended", "--methods", "replay", "--equal-memory", "sdr_two_sample_nogen"],
     "--equal-memory sdr_two_sample_nogen: not a row of this call"),
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


def test_a_call_with_method_runs_the_presets_rows(monkeypatch, tmp_path):
    ran = []

    def local_results(todo, jobs):
        for spec in todo:
            ran.append(spec)
            yield spec, _fake_result(spec)

    monkeypatch.setattr(executors, "local_results", local_results)
    (tmp_path / "backbones").mkdir()
    (tmp_path / "backbones" / "digits_smoke_seed0.pt").write_bytes(b"")  # E0 exists: nothing is pretrained
    table = table2.main(table2.parse_args(["--stream", "digits", "--preset", "smoke", "--seeds", "0", "--no-plots",
                                           "--method", "paper", "recommended", "--methods", "replay",
                                           "--out", str(tmp_path)]))
    assert sorted(s.run_id for s in ran) == ["digits_smoke_replay_seed0", "digits_smoke_sdr_seed0",
                                             "digits_smoke_sdr_two_sample_nogen_accumulate_seed0"]
    assert "| SDR (EFT for E) |" in table
    assert "| SDR (EFT for E), two-sample test, no generators [accumulate] |" in table


def test_the_names_are_the_librarys_method_presets():
    assert set(catalogue.METHOD_PRESETS) == set(training.METHODS)


@pytest.mark.parametrize("name", list(catalogue.METHOD_PRESETS))
def test_each_presets_row_builds_the_librarys_preset(name):
    """The harness row's strategy has the library preset's rule and reuse. One known
    difference, kept so that the rows stay the runs the results pages measured: the
    recommended preset's two-sample test matches classes in any order
    (``match_classes=True``), the harness row tests them in the stream's order."""
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr.detection import make_detector
    from avalanche_sdr.detection.registry import detector_rule
    from avalanche_sdr.models import small_cnn_backbone
    from benchmarks.table2.methods import PRESETS, STREAMS

    entry, preset = catalogue.METHOD_PRESETS[name], training.METHODS[name]
    (row,) = [r for r in _rows(["--method", name]) if r.method == entry.method]
    stream = STREAMS["digits"]
    strategy = METHODS[row.method].build(
        small_cnn_backbone(in_channels=1, widths=(8, 8)), stream.factory(0), stream, PRESETS["smoke"], device="cpu",
        evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]), **dict(row.options))
    built, expected = strategy.sdr.detector, make_detector(preset.detector())  # a rule name: its detector
    assert detector_rule(built) == detector_rule(expected)
    assert strategy.sdr.settings.reuse == preset.reuse == entry.reuse
    assert (strategy.model.generators is None) == (getattr(expected, "needs_generators", True) is False)
    if hasattr(expected, "settings"):
        assert dataclasses.replace(built.settings, match_classes=expected.settings.match_classes) == expected.settings
