"""``--reuse`` rows of the Table 2 harness, and the backward transfer every run records.

Fast: the rows, run ids, order and labels of the ``accumulate`` variant from synthetic
run dicts; the SDR builders get the reuse; the BWT column; the group-curve figure.
One real run (``finetune`` on digits with the smoke preset, ~2 s) checks that a
baseline's ``bwt`` equals Avalanche's ``StreamBWT`` and that its curve reaches the run JSON.
"""
import json

import pytest

from benchmarks.table2 import catalogue
from benchmarks.table2 import command as table2
from benchmarks.table2 import engine
from benchmarks.table2.report import curve_key, curve_label, format_table, table_rows, write_plots
from benchmarks.table2.specs import RunSpec, run_id
from benchmarks.table2.methods import METHODS
from benchmarks.table2.variants import Row, harness_rows, harness_variant_rows, reuse_rows

ACC = (("reuse", "accumulate"),)


def _run(method, variant="", options=None, seed=0, acc=0.8, mem=1.0, bwt=None, curve=None):
    return {
        "run_id": run_id("digits", "smoke", method, seed, variant), "method": method, "variant": variant,
        "options": dict(options or {}), "label": METHODS[method].label + (f" [{variant}]" if variant else ""),
        "stream": "digits", "stream_label": "MixedDigits (10 tasks)", "preset": "smoke", "seed": seed,
        "split": "test", "average_accuracy": acc, "memory_mb": mem, "wall_seconds": 1.0, "detection": None,
        "task_accuracies": [acc], "bwt": bwt, "group_curve": curve,
    }


def test_reuse_adds_a_variant_to_sdr_rows_only():
    assert harness_rows(["optimal", "replay"], reuses=["head", "accumulate"]) == [
        Row("optimal"), Row("optimal", "accumulate", ACC), Row("replay")]
    # Only accumulate: the SDR rows run with it alone (as --protocol paper alone); ER unchanged.
    assert harness_rows(["optimal", "replay"], reuses=["accumulate"]) == [
        Row("optimal", "accumulate", ACC), Row("replay")]
    assert harness_rows(["sdr", "ewc"]) == [Row("sdr"), Row("ewc")]  # default: the paper's reuse
    swept = harness_rows(["sdr"], sweep=True, reuses=["head", "accumulate"])
    assert [r.variant for r in swept] == ["", "a4b8", "a16b32", "accumulate", "a4b8_accumulate",
                                          "a16b32_accumulate"]
    assert dict(swept[4].options) == {"a": 4, "b": 8, "reuse": "accumulate"}
    assert reuse_rows(Row("replay"), ["head", "accumulate"]) == [Row("replay")]
    for name, method in METHODS.items():  # the library's method presets keep their own reuse
        configured = method.is_sdr and not catalogue.METHODS[name].method_preset
        assert len(reuse_rows(Row(name), ["head", "accumulate"])) == (2 if configured else 1), name


def test_reuse_option_parses_and_names_the_run_ids(tmp_path):
    args = table2.parse_args(["--methods", "optimal", "replay", "--reuse", "head", "accumulate", "--out",
                              str(tmp_path)])
    assert args.reuse == ["head", "accumulate"]
    ids = [run_id(args.stream, args.preset, r.method, 0, r.variant) for r in harness_variant_rows(args)]
    assert ids == ["digits_smoke_optimal_seed0", "digits_smoke_optimal_accumulate_seed0", "digits_smoke_replay_seed0"]
    assert table2.parse_args(["--out", str(tmp_path)]).reuse == ["head"]
    with pytest.raises(SystemExit) as exit_info:
        table2.parse_args(["--reuse", "nothing", "--out", str(tmp_path)])
    assert exit_info.value.code == 2


def test_sdr_builders_get_the_reuse():
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr import LearningReuse
    from avalanche_sdr.models import small_cnn_backbone
    from benchmarks.table2.methods import PRESETS, STREAMS

    stream, preset = STREAMS["digits"], PRESETS["smoke"]
    benchmark = stream.factory(0)
    backbone = small_cnn_backbone(in_channels=1, widths=(8, 8))
    for name in ("optimal", "sdr_two_sample_nogen"):
        built = {reuse: METHODS[name].build(backbone, benchmark, stream, preset, device="cpu",
                                            evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]),
                                            **({"reuse": reuse} if reuse else {}))
                 for reuse in (None, "accumulate")}
        assert built[None].sdr.settings == built["accumulate"].sdr.settings == preset.sdr
        assert built[None].sdr.reuse.name == "head"
        assert built["accumulate"].sdr.reuse.config() == LearningReuse().config()  # the library's defaults
    with pytest.raises(ValueError, match="reuse"):
        METHODS["sdr"].build(backbone, benchmark, stream, preset, device="cpu", evaluator=None, reuse="both")


def test_table_order_labels_and_bwt_column():
    runs = [
        _run("sdr", "a4b8_accumulate", {"a": 4, "b": 8, "reuse": "accumulate"}, mem=0.5, bwt=0.03),
        _run("sdr", "accumulate", dict(ACC), mem=2.0, bwt=0.0123),
        _run("replay", mem=0.1, bwt=-0.1),
        _run("sdr", "a4b8", {"a": 4, "b": 8}, mem=0.4, bwt=0.0),
        _run("sdr", mem=3.0, bwt=0.0),
    ]
    order = [(rs[0]["method"], rs[0]["variant"]) for rs in table_rows(runs)]
    # ER before SDR (paper order); SDR's head rows, then its accumulate rows, each own row first.
    assert order == [("replay", ""), ("sdr", ""), ("sdr", "a4b8"), ("sdr", "accumulate"), ("sdr", "a4b8_accumulate")]
    lines = format_table(runs).splitlines()
    assert lines[5].startswith("| SDR (EFT for E) [accumulate] | 80.00 ± 0.00 | +1.23 ± 0.00 | 2.00 ± 0.00 |")
    assert lines[2].startswith("| ER | 80.00 ± 0.00 | -10.00 ± 0.00 |")
    # Curves of the accuracy-memory figure: accumulate rows are a curve of their own.
    assert curve_key("sdr", {"a": 4, "b": 8, "reuse": "accumulate"}) == curve_key("sdr", dict(ACC))
    assert curve_key("sdr", dict(ACC)) != curve_key("sdr", {})
    assert curve_label("sdr", {"reuse": "accumulate"}) == "SDR (EFT for E) [accumulate]"
    assert curve_label("replay", {"shared_head": True}) == "ER [paper]"
    assert curve_label("sdr", {}) == "SDR (EFT for E)"


def _curve(groups, accuracies):
    """A group curve: one entry per task of ``groups``, ``accuracies`` its group means."""
    seen = {}
    out = []
    for task, (group, acc) in enumerate(zip(groups, accuracies)):
        seen[group] = seen.get(group, 0) + 1
        out.append({"task": task, "group": group, "times_seen": seen[group], "group_accuracy_after": acc,
                    "initial_accuracy": acc})
    return out


def test_group_curve_lines_and_figure(tmp_path):
    from avalanche_sdr.plots import plot_group_curve
    from avalanche_sdr.plots.results import ResultsFormatError, default_curve_group, group_curve_lines

    groups = [2, 0, 1, 2, 0, 2, 1, 0]  # groups 0 and 2 are seen 3 times: the lower id wins
    runs = [
        _run("optimal", curve=_curve(groups, [0.5, 0.6, 0.7, 0.8, 0.6, 0.9, 0.7, 0.6])),
        _run("optimal", seed=1, curve=_curve(groups, [0.5, 0.4, 0.7, 0.8, 0.8, 0.9, 0.7, 1.0])),
        _run("optimal", "accumulate", dict(ACC), curve=_curve(groups, [0.5, 0.6, 0.7, 0.8, 0.9, 0.9, 0.7, 1.0])),
        _run("joint"),  # no curve: left out
    ]
    assert default_curve_group(runs) == 0
    group, lines = group_curve_lines(runs)
    assert group == 0 and [line.label for line in lines] == ["Optimal (EFT for E)", "Optimal (EFT for E) [accumulate]"]
    assert lines[0].times_seen == [1, 2, 3] and lines[0].runs == [2, 2, 2]
    assert lines[0].accuracy == pytest.approx([0.5, 0.7, 0.8])  # means over the two seeds
    assert group_curve_lines(runs, group=1)[1][1].accuracy == pytest.approx([0.7, 0.7])
    with pytest.raises(ResultsFormatError):
        group_curve_lines(runs, group=7)
    with pytest.raises(ResultsFormatError):
        default_curve_group([_run("joint")])
    ax = plot_group_curve(runs)
    assert len(ax.get_lines()) == 2 and "group 0" in ax.get_xlabel()
    assert list(ax.get_lines()[1].get_ydata()) == pytest.approx([60.0, 90.0, 100.0])
    # The harness writes it beside the accuracy-memory figure.
    written = write_plots(runs, tmp_path, log=None)
    assert tmp_path / "plots" / "group_curve.png" in written
    assert (tmp_path / "plots" / "group_curve.png").stat().st_size > 0


def test_e0_file_records_the_thread_count_it_was_pretrained_with(tmp_path, capsys):
    import torch

    path = engine.prepare_backbone("digits", "smoke", 0, tmp_path)
    saved = torch.load(path, weights_only=True)
    assert saved["torch_threads"] == torch.get_num_threads()
    assert f"{torch.get_num_threads()} torch threads" in capsys.readouterr().out
    assert not engine.load_backbone(RunSpec("digits", "smoke", "finetune", 0, path)).training


@pytest.mark.slow
def test_a_run_records_bwt_equal_to_avalanches_and_its_curve(tmp_path):
    path = engine.prepare_backbone("digits", "smoke", 0, tmp_path)
    run = engine.execute_run(RunSpec("digits", "smoke", "finetune", 0, path))
    # Finetune (one shared head) forgets: negative backward transfer, the same as Avalanche's.
    assert run["bwt"] < 0 and run["forgetting"] > 0
    assert run["bwt"] == pytest.approx(run["avalanche_bwt"], abs=1e-9)
    curve = run["group_curve"]
    assert len(curve) == len(run["task_accuracies"]) == 10
    assert {"task", "group", "times_seen", "group_accuracy_after", "initial_accuracy"} <= set(curve[0])
    assert 0 < run["evaluation_seconds"] < run["wall_seconds"]
    assert json.loads(json.dumps(run))["group_curve"] == curve  # JSON-safe
