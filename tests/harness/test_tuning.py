"""Tests of ``--tune`` (``benchmarks/table2/tuning.py``): baseline hyper-parameters chosen on the
validation stream only.

The central test runs the tuning step on the digits stream whose ``test_stream`` raises
on any access (and records it): tuning must finish, choose the best validation score,
write resumable files and never touch the test stream; the same guard stops a normal
(test-stream) run, so the test would fail if tuning read the test stream. The others
check the selection rule, the grids, edge extension (on made-up scores: which points
each round adds, bounds, the limit, ties, resuming), tuning on a prefix of the stream
(``--tune-tasks``: only K experiences trained, the test stream still untouched), the
notes text, the CLI and ``--report-only``. All fast (seconds on one thread).
"""
import dataclasses
import json
import math

import pytest

from avalanche_sdr import baselines, cli
from benchmarks.table2 import command as table2
from benchmarks.table2 import tuning
from benchmarks.table2 import engine, tuning_runs
from benchmarks.table2.specs import RunSpec, run_id
from benchmarks.table2.methods import METHODS, PRESETS, STREAMS


class ReadTestStreamError(AssertionError):
    """Raised by the guarded benchmark when anything reads its test stream."""


class _Raiser:
    """Stands in for the test stream inside the benchmark's stream dictionary."""

    def __init__(self, touched):
        object.__setattr__(self, "_touched", touched)

    def _fail(self, what):
        self._touched.append(what)
        raise ReadTestStreamError(f"the test stream was read ({what})")

    def __getattr__(self, name):
        self._fail(f"attribute {name}")

    def __iter__(self):
        self._fail("iteration")

    def __len__(self):
        self._fail("len")

    def __getitem__(self, item):
        self._fail(f"item {item}")

    def __bool__(self):
        self._fail("bool")


def _guarded_digits(monkeypatch, touched):
    """Make ``STREAMS["digits"]`` build benchmarks whose test stream raises on access."""
    original = STREAMS["digits"]

    def factory(seed, sizes=None):
        benchmark = original.factory(seed, sizes)

        class Guarded(type(benchmark)):
            @property  # a data descriptor: wins over the instance's own test_stream
            def test_stream(self):
                touched.append("benchmark.test_stream")
                raise ReadTestStreamError("the test stream was read (benchmark.test_stream)")

        benchmark.__class__ = Guarded
        benchmark._streams["test"] = _Raiser(touched)  # benchmark.streams["test"]
        return benchmark

    monkeypatch.setitem(STREAMS, "digits", dataclasses.replace(original, factory=factory))


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    """Preset ``tiny`` (smoke, baselines 1 epoch) and an untrained E0 file for digits."""
    import torch

    preset = dataclasses.replace(PRESETS["smoke"], name="tiny", baselines=baselines.BaselineSettings(epochs=1))
    monkeypatch.setitem(PRESETS, "tiny", preset)
    torch.manual_seed(0)
    path = tmp_path / "e0.pt"
    torch.save({"state_dict": engine.make_backbone("digits").state_dict(),
                "torch_rng_state": torch.get_rng_state()}, path)
    return str(path)


def test_tuning_never_reads_the_test_stream(monkeypatch, tmp_path, tiny):
    touched = []
    _guarded_digits(monkeypatch, touched)
    grids = {"ewc": {"ewc_lambda": (1.0, 10000.0)}}
    out = tmp_path / "out"
    lines = []
    chosen = tuning_runs.tune("digits", "tiny", ["ewc", "finetune"], 0, out, tiny, executor="inline",
                         grids=grids, log=lines.append)
    assert touched == []  # nothing, not even an attribute lookup, reached the test stream
    assert list(chosen) == ["ewc"]  # finetune has no grid
    entry = chosen["ewc"]
    assert entry["missing"] == [] and [o for o, _ in entry["scores"]] == [{"ewc_lambda": 1.0},
                                                                            {"ewc_lambda": 10000.0}]
    best = tuning.select([(o, a) for o, a in entry["scores"]])
    assert entry["options"] == entry["scores"][best][0]
    assert entry["validation_accuracy"] == max(a for _, a in entry["scores"])
    files = sorted(p.name for p in (out / "tuning").iterdir())
    assert files == ["chosen_digits_tiny.json", "digits_tiny_ewc_grid_ewc_lambda-10000_seed0.json",
                     "digits_tiny_ewc_grid_ewc_lambda-1_seed0.json"]
    for name in files[1:]:
        run = json.loads((out / "tuning" / name).read_text())
        assert run["split"] == "valid" and len(run["task_accuracies"]) == 10
    assert entry["validation_images"] == sum(t["valid"] for t in run["task_sizes"])
    assert json.loads((out / "tuning" / "chosen_digits_tiny.json").read_text())["ewc"]["options"] == entry["options"]
    assert sum("validation acc" in line for line in lines) == 2

    # Resumable: a second call runs nothing and chooses the same.
    def no_run(spec):
        raise AssertionError(f"{spec.run_id} ran again")

    monkeypatch.setattr(engine, "execute_run", no_run)
    lines.clear()
    again = tuning_runs.tune("digits", "tiny", ["ewc"], 0, out, tiny, executor="inline", grids=grids,
                        log=lines.append)
    assert again == chosen and "tuning: skipping 2 finished tuning run(s)" in lines[1]


def test_the_guard_stops_a_run_that_reads_the_test_stream(monkeypatch, tiny):
    """The control: the guard of the test above does catch a test-stream evaluation."""
    touched = []
    _guarded_digits(monkeypatch, touched)
    spec = RunSpec("digits", "tiny", "ewc", 0, tiny)  # split="test": a table row
    with pytest.raises(ReadTestStreamError):
        engine.execute_run(spec)
    assert touched == ["benchmark.test_stream"]


def test_validation_runs_are_for_baselines_only(tiny):
    with pytest.raises(ValueError, match="baselines only"):
        engine.execute_run(RunSpec("digits", "tiny", "sdr", 0, tiny, split="valid"))
    with pytest.raises(ValueError, match="split='valid'"):
        tuning_runs.run_tuning([RunSpec("digits", "tiny", "ewc", 0, tiny)], "unused", log=None)


def test_select_takes_the_highest_score_and_the_first_on_ties():
    scores = [({"lr": 1e-4}, 0.50), ({"lr": 1e-3}, 0.75), ({"lr": 1e-2}, 0.75), ({"lr": 1e-1}, 0.25)]
    assert tuning.select(scores) == 1
    assert tuning.select(scores[2:]) == 0
    with pytest.raises(ValueError):
        tuning.select([])


def test_grids_contain_the_presets_values_and_relative_epochs_follow_the_preset():
    for preset in ("smoke", "cpu", "paper"):
        settings = PRESETS[preset].baselines
        for method in tuning.TUNING_GRIDS:
            grid, notes = tuning.resolved_grid(method, preset)
            for name, values in grid.items():
                assert getattr(settings, name) in values, (method, preset, name)
    assert tuning.resolved_grid("replay", "smoke")[0]["epochs"] == [2, 3, 6]
    assert tuning.resolved_grid("replay", "cpu")[0] == {"lr": [1e-4, 1e-3, 1e-2], "epochs": [5, 10, 20]}
    assert tuning.resolved_grid("replay", "cpu")[1]["epochs"] == "0.5x, 1x, 2x the preset's 10"
    assert tuning.Times((0.5, 1.0)).resolve(1) == [1]  # at least 1, duplicates dropped
    for method, axes in tuning.TUNING_GRIDS.items():  # one declaration per setting: values, scale, bounds
        assert all(isinstance(axis, tuning.Axis) and axis.scale for axis in axes.values()), method
    assert tuning.TUNING_GRIDS["ewc"]["ewc_decay"].high == 1.0
    assert tuning.TUNING_GRIDS["dgr"]["dgr_latent_dim"].high == 1024
    with pytest.raises(ValueError, match="ascending"):
        tuning.Axis((10.0, 1.0))
    with pytest.raises(ValueError, match="positive"):
        tuning.Axis((0.0, 1.0), "log")
    points = tuning.grid_points({"ewc_lambda": [1.0, 10.0], "ewc_decay": [0.9, 1.0]})
    assert points[1] == {"ewc_lambda": 1.0, "ewc_decay": 1.0}  # the first parameter varies slowest
    assert tuning.grid_variant(points[1]) == "grid_ewc_lambda-1_ewc_decay-1"
    assert len(tuning.grid_points(tuning.resolved_grid("ewc", "cpu")[0])) == 10


def _probe(strategy, name):
    from avalanche.training.plugins import EWCPlugin

    if name in ("ewc_lambda", "ewc_decay"):
        plugin = next(p for p in strategy.plugins if isinstance(p, EWCPlugin))
        return plugin.ewc_lambda if name == "ewc_lambda" else plugin.decay_factor
    if name == "lr":
        return strategy.optimizer.param_groups[0]["lr"]
    if name == "epochs":
        return strategy.train_epochs
    if name == "dgr_latent_dim":
        return strategy.generator_strategy.model.dim
    if name == "slda_shrinkage":
        return strategy.shrinkage_param
    if name in ("ranpac_dim", "klda_dim"):
        return strategy.model.features.out_dim
    if name == "ranpac_ridge":
        return strategy.model.ridge
    if name == "klda_gamma":
        return strategy.model.features.gamma_scale
    if name == "klda_shrinkage":
        return strategy.model.shrinkage
    raise KeyError(name)


@pytest.mark.parametrize("method", list(tuning.TUNING_GRIDS))
def test_every_grid_value_reaches_the_strategy(method):
    """A grid value the builder ignored would make tuning choose among identical runs."""
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr.models import small_cnn_backbone

    stream, preset = STREAMS["digits"], PRESETS["smoke"]
    benchmark = stream.factory(0, **({"original_class_ids": True} if METHODS[method].task_free else {}))
    backbone = small_cnn_backbone(in_channels=1, widths=(8, 8))
    grid, _ = tuning.resolved_grid(method, "smoke")
    for name, values in grid.items():
        for value in values:
            strategy = METHODS[method].build(
                backbone, benchmark, stream, preset, device="cpu", **{name: value},
                evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]))
            assert _probe(strategy, name) == value, (method, name, value)


def _hand_made_chosen():
    return {
        "replay": {
            "label": "ER", "stream": "digits", "preset": "cpu", "seed": 3,
            "grid": {"lr": [1e-4, 1e-3, 1e-2], "epochs": [5, 10]},
            "grid_note": {"lr": "absolute", "epochs": "0.5x, 1x the preset's 10"},
            "scores": [[{"lr": 1e-4, "epochs": 5}, 0.5], [{"lr": 1e-4, "epochs": 10}, 0.6],
                       [{"lr": 1e-3, "epochs": 5}, 0.9], [{"lr": 1e-3, "epochs": 10}, 0.9],
                       [{"lr": 1e-2, "epochs": 5}, 0.7], [{"lr": 1e-2, "epochs": 10}, 0.8]],
            "missing": [], "validation_images": 180, "options": {"lr": 1e-3, "epochs": 5},
            "validation_accuracy": 0.9, "extend": 2, "tune_tasks": None, "extensions": [],
            "edges": [{"name": "epochs", "value": 5, "reason": "best 5 is `epochs`'s smallest; not extended: "
                       "2 (0.125x the preset's 10) is below `epochs`' declared minimum 3"}],
        },
        "ewc": {
            "label": "Online EWC", "stream": "digits", "preset": "cpu", "seed": 3,
            "grid": {"ewc_lambda": [1.0, 100.0]}, "grid_note": {"ewc_lambda": "absolute"},
            "scores": [[{"ewc_lambda": 1.0}, 0.5], [{"ewc_lambda": 100.0}, None]],
            "missing": ["digits_cpu_ewc_grid_ewc_lambda-100_seed3"], "validation_images": None,
            "options": None, "validation_accuracy": None,
        },
    }


def test_notes_name_grid_scores_choice_and_seed():
    notes = tuning.format_notes(_hand_made_chosen())
    assert notes.startswith("\n## Tuning (validation stream only)\n")
    assert "tuning seed 3 only" in notes and "no tuning run reads the test stream" in notes
    assert "### ER (`replay`)" in notes
    assert ("Grid: `lr` ∈ {0.0001, 0.001, 0.01} × `epochs` ∈ {5, 10} (0.5x, 1x the preset's 10); seed 3."
            in notes)
    assert "Chosen: `lr` = 0.001, `epochs` = 5 (validation accuracy 90.00% on 180 validation images)." in notes
    assert "| 0.001 | 5 | 90.00 | grid | chosen |" in notes and "| 0.001 | 10 | 90.00 | grid |  |" in notes
    assert "at most 2 value(s) per axis" in notes and "Extended to" not in notes
    assert ("At an edge of the searched values: best 5 is `epochs`'s smallest; not extended: 2 (0.125x the "
            "preset's 10) is below `epochs`' declared minimum 3." in notes)
    assert "Incomplete: 1 of 2 point(s) not run yet; no value chosen." in notes
    assert "| 100 | not run | grid |  |" in notes
    assert tuning.format_notes({}) == ""


def test_cli_checks_tune_arguments(capsys):
    with pytest.raises(SystemExit) as err:
        table2.parse_args(["--methods", "sdr", "finetune", "--tune"])
    assert err.value.code == 2 and "none of --methods has a tuning grid" in capsys.readouterr().err
    for option in (["--tune-seed", "1"], ["--tune-extend", "1"], ["--tune-tasks", "1"], ["--tuned-only"]):
        with pytest.raises(SystemExit) as err:
            table2.parse_args(option)
        assert err.value.code == 2 and f"{option[0]} needs --tune" in capsys.readouterr().err
    for bad in (["--tune-extend", "-1"], ["--tune-tasks", "0"]):
        with pytest.raises(SystemExit):
            table2.parse_args(["--methods", "ewc", "--tune", *bad])
    args = table2.parse_args(["--methods", "ewc", "sdr", "--seeds", "4", "5", "--tune"])
    assert args.tune and args.tune_seed is None and args.tune_extend is None and args.tune_tasks is None
    args = table2.parse_args(["--methods", "ewc", "--tune", "--tune-extend", "0", "--tune-tasks", "3"])
    assert args.tune_extend == 0 and args.tune_tasks == 3


def _write_tuning_files(out, scores, tasks=None):
    for lam, acc in scores.items():
        options = {"ewc_lambda": lam, "ewc_decay": 0.9}
        rid = run_id("digits", "smoke", "ewc", 0, tuning.grid_variant(options, tasks))
        cli.write_json(out / "tuning" / f"{rid}.json", {"split": "valid", "average_accuracy": acc,
                                                       "options": options, "tasks": tasks})


def _row(method, variant="", options=None, acc=0.5):
    return {"run_id": run_id("digits", "smoke", method, 0, variant), "method": method, "variant": variant,
            "options": options or {}, "label": METHODS[method].label + (f" [{variant}]" if variant else ""),
            "stream": "digits", "stream_label": "MixedDigits (10 tasks)", "preset": "smoke", "seed": 0,
            "split": "test", "average_accuracy": acc, "memory_mb": 1.0, "wall_seconds": 1.0,
            "detection": None, "task_accuracies": [acc]}


@pytest.mark.parametrize("tasks", [None, 2])
def test_report_only_rewrites_the_notes_from_the_tuning_files(tmp_path, monkeypatch, tasks):
    grids = {"ewc": {"ewc_lambda": tuning.Axis((10.0, 1000.0), "log"), "ewc_decay": (0.9,)}}
    monkeypatch.setattr(tuning, "TUNING_GRIDS", grids)
    # 1000 is the grid's best, at its edge: the extension's 100000 (lower) was run too.
    _write_tuning_files(tmp_path, {10.0: 0.6, 1000.0: 0.8, 100000.0: 0.7}, tasks)
    cli.write_json(tmp_path / "runs" / "digits_smoke_ewc_seed0.json", _row("ewc"))
    tuned = _row("ewc", "tuned", {"ewc_lambda": 1000.0, "ewc_decay": 0.9}, acc=0.7)
    cli.write_json(tmp_path / "runs" / "digits_smoke_ewc_tuned_seed0.json", tuned)
    argv = ["--methods", "ewc", "--seeds", "0", "--tune", "--report-only", "--no-plots", "--out", str(tmp_path)]
    argv += [] if tasks is None else ["--tune-tasks", str(tasks)]
    table = table2.main(table2.parse_args(argv))
    assert "| Online EWC [tuned] | 70.00 ± 0.00 |" in table
    md = (tmp_path / "table2.md").read_text()
    assert md.endswith(tuning.format_notes(tuning_runs.choose("digits", "smoke", ["ewc"], 0, tmp_path, tasks=tasks)))
    assert "Chosen: `ewc_lambda` = 1000, `ewc_decay` = 0.9 (validation accuracy 80.00%)." in md
    assert "- round 1: added 100000: best 1000 was `ewc_lambda`'s largest" in md
    assert "| 100000 | 0.9 | 70.00 | extension 1 |  |" in md
    assert ("the first 2 experience(s) of `train_stream`" in md) == (tasks is not None)
    assert "own values" not in md
    # --tune-extend 0: the grid alone, which the same files complete.
    table2.main(table2.parse_args(argv + ["--tune-extend", "0"]))
    assert "Edge extension: off" in (tmp_path / "table2.md").read_text()
    # A [tuned] run made with other values is refused, not silently reported.
    cli.write_json(tmp_path / "runs" / "digits_smoke_ewc_tuned_seed0.json",
                   dict(tuned, options={"ewc_lambda": 10.0, "ewc_decay": 0.9}))
    with pytest.raises(SystemExit, match="other values than the chosen ones"):
        table2.main(table2.parse_args(argv))


def test_a_choice_equal_to_the_preset_gets_no_tuned_row(tmp_path, monkeypatch):
    grids = {"ewc": {"ewc_lambda": tuning.Axis((1.0, 100.0), "log"), "ewc_decay": (0.9,)}}
    monkeypatch.setattr(tuning, "TUNING_GRIDS", grids)
    _write_tuning_files(tmp_path, {1.0: 0.6, 100.0: 0.8, 10000.0: 0.7})  # smoke's own 100, 0.9 wins
    cli.write_json(tmp_path / "runs" / "digits_smoke_ewc_seed0.json", _row("ewc"))
    argv = ["--methods", "ewc", "--seeds", "0", "--tune", "--report-only", "--no-plots", "--out", str(tmp_path)]
    table = table2.main(table2.parse_args(argv))
    assert "| Online EWC | 50.00 ± 0.00 |" in table and "[tuned]" not in table.split("## Tuning")[0]
    entry = tuning_runs.choose("digits", "smoke", ["ewc"], 0, tmp_path)["ewc"]
    assert entry["options"] == {"ewc_lambda": 100.0, "ewc_decay": 0.9} and tuning.same_as_preset(entry)
    assert not tuning.same_as_preset(dict(entry, options={"ewc_lambda": 100.0, "ewc_decay": 1.0}))
    assert not tuning.same_as_preset(dict(entry, options=None))
    assert ("These are preset `smoke`'s own values: no `[tuned]` row (it would repeat the untuned row run for "
            "run); the untuned row is the tuned one.") in (tmp_path / "table2.md").read_text()


# --------------------------------------------------------------------- edge extension


def test_an_edge_adds_one_value_per_round_with_the_new_points_only():
    # Higher lambda always better, decay 0.9 better: the best sits at lambda's largest value.
    found = tuning.search("ewc", "cpu", lambda o: math.log10(o["ewc_lambda"]) - o["ewc_decay"], extend=1)
    assert found.points[:10] == tuning.grid_points(tuning.resolved_grid("ewc", "cpu")[0])
    # Round 1: 1e5 with every decay, nothing else; decay 0.9 is the smallest, so 0.8 too (linear step).
    assert found.extensions == [
        {"name": "ewc_lambda", "value": 1e5, "round": 1,
         "reason": "added 100000: best 10000 was `ewc_lambda`'s largest"},
        {"name": "ewc_decay", "value": 0.8, "round": 1, "reason": "added 0.8: best 0.9 was `ewc_decay`'s smallest"}]
    assert found.points[10:] == ([{"ewc_lambda": lam, "ewc_decay": 0.8} for lam in (1.0, 10.0, 100.0, 1000.0, 10000.0)]
                                 + [{"ewc_lambda": 1e5, "ewc_decay": d} for d in (0.8, 0.9, 1.0)])
    assert found.searched == {"ewc_lambda": [1.0, 10.0, 100.0, 1000.0, 10000.0, 1e5], "ewc_decay": [0.8, 0.9, 1.0]}
    assert found.points[found.best] == {"ewc_lambda": 1e5, "ewc_decay": 0.8}
    # extend=1: the limit stops both axes, and says so.
    assert [e["reason"].split("not extended: ")[1] for e in found.edges] == [
        "the limit of 1 value(s) added per axis is reached"] * 2


def test_extension_respects_bounds_and_stops_after_n():
    # Decay 1.0 best: bounded above by 1.0, never extended; lambda grows twice, then stops.
    found = tuning.search("ewc", "cpu", lambda o: o["ewc_lambda"] + o["ewc_decay"])
    assert [(e["name"], e["value"], e["round"]) for e in found.extensions] == [("ewc_lambda", 1e5, 1),
                                                                              ("ewc_lambda", 1e6, 2)]
    assert len(found.points) == 10 + 2 + 2
    assert [e["reason"] for e in found.edges] == [
        "best 1e+06 is `ewc_lambda`'s largest; not extended: the limit of 2 value(s) added per axis is reached",
        "best 1 is `ewc_decay`'s largest; not extended: 1.1 is above `ewc_decay`'s declared maximum 1"]
    # DGR: 64 -> 256 -> 1024, the declared maximum; with a third extension allowed it still stops there.
    found = tuning.search("dgr", "smoke", lambda o: o["dgr_latent_dim"], extend=5)
    assert found.searched == {"dgr_latent_dim": [2, 16, 64, 256, 1024]}
    assert found.edges[0]["reason"].endswith("4096 is above `dgr_latent_dim`'s declared maximum 1024")
    # ... and downwards 2 / 8 rounds to 0, below its minimum 1: no extension at all.
    found = tuning.search("dgr", "smoke", lambda o: -o["dgr_latent_dim"])
    assert found.extensions == [] and len(found.points) == 3
    assert "0 (0.25 rounded) is below `dgr_latent_dim`'s declared minimum 1" in found.edges[0]["reason"]
    # extend=0: the fixed grid only.
    found = tuning.search("dgr", "smoke", lambda o: o["dgr_latent_dim"], extend=0)
    assert len(found.points) == 3 and "extension is off (--tune-extend 0)" in found.edges[0]["reason"]
    # An inner best adds nothing; a plain tuple (a test's grid) is never extended.
    assert tuning.search("dgr", "smoke", lambda o: -abs(o["dgr_latent_dim"] - 16)).extensions == []
    plain = tuning.search("ewc", "cpu", lambda o: o["ewc_lambda"], grids={"ewc": {"ewc_lambda": (1.0, 10.0)}})
    assert plain.extensions == [] and "not extensible" in plain.edges[0]["reason"]


def test_relative_epochs_extend_by_doubling_their_factors_and_drop_duplicates():
    # smoke: 3 epochs per task, grid 2, 3, 6 (0.5x, 1x, 2x); lr 1e-4 and most epochs best.
    found = tuning.search("replay", "smoke", lambda o: o["epochs"] - math.log10(o["lr"]))
    assert found.searched == {"lr": [1e-6, 1e-5, 1e-4, 1e-3, 1e-2], "epochs": [2, 3, 6, 12, 24]}
    assert found.extensions[1]["reason"] == "added 12 (4x the preset's 3): best 6 was `epochs`'s largest"
    assert all(isinstance(v, int) for v in found.searched["epochs"])
    assert found.extensions[0]["value"] == 1e-5  # not 1.0000000000000002e-05: run ids stay readable
    # Fewest epochs best: 0.25x of 3 is 1 (added), 0.125x is 1 again (a duplicate: stop).
    found = tuning.search("replay", "smoke", lambda o: -o["epochs"] + o["lr"])
    assert found.searched["epochs"] == [1, 2, 3, 6]
    assert found.edges[-1]["reason"] == ("best 1 is `epochs`'s smallest; not extended: 1 (0.125x the preset's 3) "
                                         "is already on the axis")
    assert found.searched["lr"] == [1e-4, 1e-3, 1e-2, 0.1, 1.0]  # lr's declared maximum 1.0 reached exactly


def test_an_extension_changes_the_choice_only_by_scoring_higher():
    # (1e4, 0.9) is best on the grid; 1e5 ties with 1e4 and 0.8 scores lower than 0.9: the
    # grid's point stays chosen, and as it is no longer at an edge, nothing more is added.
    found = tuning.search("ewc", "cpu", lambda o: min(o["ewc_lambda"], 1e4) + (o["ewc_decay"] == 0.9))
    assert [e["value"] for e in found.extensions] == [1e5, 0.8]
    assert found.points[found.best] == {"ewc_lambda": 1e4, "ewc_decay": 0.9} and found.best < 10
    assert found.edges == [] and len(found.points) == 10 + 8


def test_the_search_resumes_from_the_scores_it_has():
    full = tuning.search("dgr", "smoke", lambda o: o["dgr_latent_dim"])
    partial = tuning.search("dgr", "smoke", lambda o: None if o["dgr_latent_dim"] == 1024 else o["dgr_latent_dim"])
    assert partial.missing == [{"dgr_latent_dim": 1024}] and partial.best is None
    assert partial.points == full.points and partial.extensions == full.extensions
    assert tuning.search("dgr", "smoke", lambda o: None).points == [{"dgr_latent_dim": v} for v in (2, 16, 64)]


def _fake_run(spec, score):
    options = dict(spec.options)
    sizes = [{"valid": 10}] * 10
    return {"run_id": spec.run_id, "split": spec.split, "average_accuracy": score(options), "options": options,
            "wall_seconds": 0.0, "task_sizes": sizes, **({"tasks": spec.tasks} if spec.tasks else {})}


def test_tune_runs_round_after_round_through_the_executor_and_resumes(monkeypatch, tmp_path):
    ran, made = [], []

    def execute(spec):
        ran.append(spec)
        return _fake_run(spec, lambda o: o["dgr_latent_dim"] / 2000)

    def backbone():
        made.append(1)
        return "e0.pt"

    monkeypatch.setattr(engine, "execute_run", execute)
    chosen = tuning_runs.tune("digits", "smoke", ["dgr"], 0, tmp_path, backbone, executor="inline", log=None)
    assert [dict(s.options)["dgr_latent_dim"] for s in ran] == [2, 16, 64, 256, 1024]
    assert made == [1] and {s.backbone_path for s in ran} == {"e0.pt"} and {s.split for s in ran} == {"valid"}
    entry = chosen["dgr"]
    assert entry["options"] == {"dgr_latent_dim": 1024} and entry["validation_accuracy"] == 1024 / 2000
    assert entry["grid"] == {"dgr_latent_dim": [2, 16, 64]}
    assert entry["searched"] == {"dgr_latent_dim": [2, 16, 64, 256, 1024]}
    assert [o["dgr_latent_dim"] for o, _ in entry["scores"]] == [2, 16, 64, 256, 1024]
    assert json.loads(tuning_runs.chosen_path(tmp_path, "digits", "smoke").read_text()) == chosen
    # tuning another method later keeps this choice in the file
    monkeypatch.setattr(engine, "execute_run", lambda spec: _fake_run(spec, lambda o: o["ewc_lambda"] / 1e5))
    other = tuning_runs.tune("digits", "smoke", ["ewc"], 0, tmp_path, backbone, executor="inline", extend=0, log=None)
    on_disk = json.loads(tuning_runs.chosen_path(tmp_path, "digits", "smoke").read_text())
    assert set(other) == {"ewc"} and on_disk == {**chosen, **other}
    notes = tuning.format_notes(chosen)
    assert "Extended to `dgr_latent_dim` ∈ {2, 16, 64, 256, 1024}:" in notes
    assert "- round 1: added 256: best 64 was `dgr_latent_dim`'s largest" in notes
    assert "- round 2: added 1024: best 256 was `dgr_latent_dim`'s largest" in notes
    assert "| 256 | 12.80 | extension 1 |  |" in notes and "| 1024 | 51.20 | extension 2 | chosen |" in notes
    assert "not extended: the limit of 2 value(s) added per axis is reached" in notes
    # A rerun runs nothing (not even E0) and chooses the same; so does --report-only's choose.
    ran.clear(), made.clear()
    assert tuning_runs.tune("digits", "smoke", ["dgr"], 0, tmp_path, backbone, executor="inline", log=None) == chosen
    assert ran == [] and made == []
    assert tuning_runs.choose("digits", "smoke", ["dgr"], 0, tmp_path) == chosen
    # Without extension the same files give the grid's choice.
    assert tuning_runs.choose("digits", "smoke", ["dgr"], 0, tmp_path, extend=0)["dgr"]["options"] == {"dgr_latent_dim": 64}


def test_a_failed_round_stops_the_search_without_retrying(monkeypatch, tmp_path):
    ran = []

    def execute(spec):
        ran.append(dict(spec.options)["dgr_latent_dim"])
        if dict(spec.options)["dgr_latent_dim"] == 256:
            raise RuntimeError("out of memory")
        return _fake_run(spec, lambda o: o["dgr_latent_dim"] / 2000)

    monkeypatch.setattr(engine, "execute_run", execute)
    chosen = tuning_runs.tune("digits", "smoke", ["dgr"], 0, tmp_path, "e0.pt", executor="inline", log=None)
    assert ran == [2, 16, 64, 256]
    assert chosen["dgr"]["options"] is None
    assert chosen["dgr"]["missing"] == ["digits_smoke_dgr_grid_dgr_latent_dim-256_seed0"]
    assert "Incomplete: 1 of 4 point(s) not run yet; no value chosen." in tuning.format_notes(chosen)


# --------------------------------------------------------------------- prefix of the stream


def test_prefix_runs_have_their_own_ids_and_never_mix_with_whole_stream_runs(monkeypatch, tmp_path):
    assert tuning.grid_variant({"lr": 1e-3}, 5) == "grid_lr-0.001_first5"
    assert tuning.grid_variant({"lr": 1e-3}) == "grid_lr-0.001"
    monkeypatch.setattr(engine, "execute_run", lambda spec: _fake_run(spec, lambda o: -o["dgr_latent_dim"]))
    whole = tuning_runs.tune("digits", "smoke", ["dgr"], 0, tmp_path, "e0.pt", executor="inline", log=None)
    assert tuning_runs.choose("digits", "smoke", ["dgr"], 0, tmp_path, tasks=3)["dgr"]["missing"] == [
        f"digits_smoke_dgr_grid_dgr_latent_dim-{v}_first3_seed0" for v in (2, 16, 64)]
    prefix = tuning_runs.tune("digits", "smoke", ["dgr"], 0, tmp_path, "e0.pt", executor="inline", log=None, tasks=3)
    assert whole["dgr"]["tune_tasks"] is None and prefix["dgr"]["tune_tasks"] == 3
    assert prefix["dgr"]["validation_images"] == 30 and whole["dgr"]["validation_images"] == 100
    assert "trained on the first 3 experience(s) of `train_stream`, scored on the first 3 of `valid_stream`" in (
        tuning.format_notes(prefix))
    # A run file whose content disagrees with its name is refused, not used.
    path = tmp_path / "tuning" / "digits_smoke_dgr_grid_dgr_latent_dim-2_first3_seed0.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()), tasks=None)))
    with pytest.raises(ValueError, match="trained on all task"):
        tuning_runs.choose("digits", "smoke", ["dgr"], 0, tmp_path, tasks=3)


def test_prefix_tuning_trains_k_tasks_and_never_reads_the_test_stream(monkeypatch, tmp_path, tiny):
    from avalanche.training import EWC

    touched, trained = [], []
    _guarded_digits(monkeypatch, touched)
    train = EWC.train

    def spy(self, experiences, *args, **kwargs):
        trained.append(experiences.current_experience)
        return train(self, experiences, *args, **kwargs)

    monkeypatch.setattr(EWC, "train", spy)
    grids = {"ewc": {"ewc_lambda": tuning.Axis((1.0, 10.0), "log")}}
    out = tmp_path / "out"
    chosen = tuning_runs.tune("digits", "tiny", ["ewc"], 0, out, tiny, executor="inline", grids=grids, extend=1,
                         tasks=3, log=None)
    assert touched == []
    entry = chosen["ewc"]
    assert entry["missing"] == [] and len(entry["scores"]) == 3 and len(entry["extensions"]) == 1
    # One value beyond the edge the grid's best sat on: 0.1 if lambda 1 won (or tied), else 100.
    grid_best = tuning.select(entry["scores"][:2])
    assert entry["extensions"][0]["value"] == (0.1 if grid_best == 0 else 100.0)
    assert trained == [0, 1, 2] * 3  # three runs, each on the first 3 experiences only
    for name in (p.name for p in (out / "tuning").iterdir() if p.name.startswith("digits_")):
        assert name.endswith("_first3_seed0.json")
        run = json.loads((out / "tuning" / name).read_text())
        assert run["split"] == "valid" and run["tasks"] == 3 and len(run["task_accuracies"]) == 3
    assert entry["validation_images"] == sum(t["valid"] for t in run["task_sizes"][:3])


def test_prefix_runs_are_tuning_runs_only(tiny):
    with pytest.raises(ValueError, match="must be a tuning run"):
        engine.execute_run(RunSpec("digits", "tiny", "ewc", 0, tiny, tasks=3))
    with pytest.raises(ValueError, match=r"tasks 11 not in 1\.\.10"):
        engine.execute_run(RunSpec("digits", "tiny", "ewc", 0, tiny, split="valid", tasks=11))


@pytest.mark.parametrize("text", ["[1, 2]", "{not json"])
def test_tune_refuses_a_chosen_file_it_cannot_keep(monkeypatch, tmp_path, text):
    path = tuning_runs.chosen_path(tmp_path, "digits", "smoke")
    path.parent.mkdir(parents=True)
    path.write_text(text)
    ran = []
    monkeypatch.setattr(engine, "execute_run", ran.append)
    with pytest.raises(SystemExit, match="move it away to start afresh"):
        tuning_runs.tune("digits", "smoke", ["dgr"], 0, tmp_path, "e0.pt", executor="inline", extend=0, log=None)
    assert ran == [] and path.read_text() == text  # refused before any run
