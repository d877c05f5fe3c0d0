"""Tests of ``--tune`` (``benchmarks/tuning.py``): baseline hyper-parameters chosen on the
validation stream only.

The central test runs the tuning step on the digits stream whose ``test_stream`` raises
on any access (and records it): tuning must finish, choose the best validation score,
write resumable files and never touch the test stream; the same guard stops a normal
(test-stream) run, so the test would fail if tuning read the test stream. The others
check the selection rule, the grids, the notes text, the CLI and ``--report-only``,
on hand-made scores. All fast (a few seconds on one thread).
"""
import dataclasses
import json

import pytest

from avalanche_sdr import baselines, cli
from benchmarks import table2, tuning
from benchmarks.methods import METHODS, PRESETS, STREAMS


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
    torch.save({"state_dict": table2._make_backbone("digits").state_dict(),
                "torch_rng_state": torch.get_rng_state()}, path)
    return str(path)


def test_tuning_never_reads_the_test_stream(monkeypatch, tmp_path, tiny):
    touched = []
    _guarded_digits(monkeypatch, touched)
    grids = {"ewc": {"ewc_lambda": (1.0, 10000.0)}}
    out = tmp_path / "out"
    lines = []
    chosen = tuning.tune("digits", "tiny", ["ewc", "finetune"], 0, out, tiny, executor="inline",
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

    monkeypatch.setattr(table2, "execute_run", no_run)
    lines.clear()
    again = tuning.tune("digits", "tiny", ["ewc"], 0, out, tiny, executor="inline", grids=grids,
                        log=lines.append)
    assert again == chosen and "tuning: skipping 2 finished tuning run(s)" in lines[1]


def test_the_guard_stops_a_run_that_reads_the_test_stream(monkeypatch, tiny):
    """The control: the guard of the test above does catch a test-stream evaluation."""
    touched = []
    _guarded_digits(monkeypatch, touched)
    spec = table2.RunSpec("digits", "tiny", "ewc", 0, tiny)  # split="test": a table row
    with pytest.raises(ReadTestStreamError):
        table2.execute_run(spec)
    assert touched == ["benchmark.test_stream"]


def test_validation_runs_are_for_baselines_only(tiny):
    with pytest.raises(ValueError, match="baselines only"):
        table2.execute_run(table2.RunSpec("digits", "tiny", "sdr", 0, tiny, split="valid"))
    with pytest.raises(ValueError, match="split='valid'"):
        tuning.run_tuning([table2.RunSpec("digits", "tiny", "ewc", 0, tiny)], "unused", log=None)


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
    raise KeyError(name)


@pytest.mark.parametrize("method", list(tuning.TUNING_GRIDS))
def test_every_grid_value_reaches_the_strategy(method):
    """A grid value the builder ignored would make tuning choose among identical runs."""
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr.models import small_cnn_backbone

    stream, preset = STREAMS["digits"], PRESETS["smoke"]
    benchmark = stream.factory(0)
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
            "validation_accuracy": 0.9,
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
    assert "| 0.001 | 5 | 90.00 | chosen |" in notes and "| 0.001 | 10 | 90.00 |  |" in notes
    assert "At the edge of the grid" not in notes  # lr 1e-3 is inside; epochs has 2 values only
    assert "Incomplete: 1 of 2 grid point(s) not run yet; no value chosen." in notes
    assert "| 100 | not run |  |" in notes
    assert tuning.format_notes({}) == ""


def test_cli_checks_tune_arguments(capsys):
    with pytest.raises(SystemExit) as err:
        table2.parse_args(["--methods", "sdr", "finetune", "--tune"])
    assert err.value.code == 2 and "none of --methods has a tuning grid" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        table2.parse_args(["--tune-seed", "1"])
    args = table2.parse_args(["--methods", "ewc", "sdr", "--seeds", "4", "5", "--tune"])
    assert args.tune and args.tune_seed is None


def _write_tuning_files(out, scores):
    for lam, acc in scores.items():
        options = {"ewc_lambda": lam, "ewc_decay": 0.9}
        rid = table2.run_id("digits", "smoke", "ewc", 0, tuning.grid_variant(options))
        cli.write_json(out / "tuning" / f"{rid}.json", {"split": "valid", "average_accuracy": acc,
                                                       "options": options})


def _row(method, variant="", options=None, acc=0.5):
    return {"run_id": table2.run_id("digits", "smoke", method, 0, variant), "method": method, "variant": variant,
            "options": options or {}, "label": METHODS[method].label + (f" [{variant}]" if variant else ""),
            "stream": "digits", "stream_label": "MixedDigits (10 tasks)", "preset": "smoke", "seed": 0,
            "split": "test", "average_accuracy": acc, "memory_mb": 1.0, "wall_seconds": 1.0,
            "detection": None, "task_accuracies": [acc]}


def test_report_only_rewrites_the_notes_from_the_tuning_files(tmp_path, monkeypatch):
    grids = {"ewc": {"ewc_lambda": (1.0, 100.0), "ewc_decay": (0.9,)}}
    monkeypatch.setattr(tuning, "TUNING_GRIDS", grids)
    _write_tuning_files(tmp_path, {1.0: 0.6, 100.0: 0.8})
    cli.write_json(tmp_path / "runs" / "digits_smoke_ewc_seed0.json", _row("ewc"))
    tuned = _row("ewc", "tuned", {"ewc_lambda": 100.0, "ewc_decay": 0.9}, acc=0.7)
    cli.write_json(tmp_path / "runs" / "digits_smoke_ewc_tuned_seed0.json", tuned)
    argv = ["--methods", "ewc", "--seeds", "0", "--tune", "--report-only", "--no-plots", "--out", str(tmp_path)]
    table = table2.main(table2.parse_args(argv))
    assert "| Online EWC [tuned] | 70.00 ± 0.00 |" in table
    md = (tmp_path / "table2.md").read_text()
    assert md.endswith(tuning.format_notes(tuning.choose("digits", "smoke", ["ewc"], 0, tmp_path)))
    assert "Chosen: `ewc_lambda` = 100, `ewc_decay` = 0.9 (validation accuracy 80.00%)." in md
    # A [tuned] run made with other values is refused, not silently reported.
    cli.write_json(tmp_path / "runs" / "digits_smoke_ewc_tuned_seed0.json",
                   dict(tuned, options={"ewc_lambda": 1.0, "ewc_decay": 0.9}))
    with pytest.raises(SystemExit, match="other values than the chosen ones"):
        table2.main(table2.parse_args(argv))
