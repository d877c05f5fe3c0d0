"""benchmarks.studies.learning_reuse.top_layers: its rows are the harness's variants, and its
rule (fixed before the runs) qualifies, refuses and chooses as written."""
import pytest

from benchmarks.studies.learning_reuse import top_layers as study


def test_rows_are_harness_variants_with_the_update_options():
    assert study.row("head") == ("sdr_two_sample_nogen", "", ())
    assert study.row("accumulate") == ("sdr_two_sample_nogen", "accumulate", (("reuse", "accumulate"),))
    method, variant, options = study.row("top1_epochs3")
    assert variant == "accumulate_top_1_epochs_3"
    assert dict(options) == {"reuse": "accumulate", "update_top_layers": 1, "update_epochs": 3}
    assert [study.row_name(study.row(name)[1]) for name in study.ROWS] == list(study.ROWS)
    with pytest.raises(ValueError, match="unknown row"):
        study.row("top9")


def _runs(accuracy, cpu):
    """Every validation run: ``accuracy(stream, seed, row)`` in %, ``cpu(row)`` seconds."""
    runs = []
    for stream, seeds in study.VALIDATION.items():
        for seed in seeds:
            for name in study.ROWS:
                runs.append({"stream": stream, "seed": seed, "row": name, "setup_cpu_seconds": 1.0,
                             "cpu_seconds": 1.0 + cpu(name), "average_accuracy": accuracy(stream, seed, name) / 100})
    return runs


def test_the_cheapest_qualifying_candidate_is_chosen():
    cost = {"top1": 10, "top2": 20, "epochs3": 30, "top1_epochs3": 5, "top2_epochs3": 8}

    def accuracy(stream, seed, name):
        if name == "top1_epochs3" and stream == "emnist100":
            return 90.0 - 0.11  # just past the per-stream margin
        return 90.0

    chosen, failures = study.choose(_runs(accuracy, lambda name: cost.get(name, 50)))
    assert chosen == "top2_epochs3"
    assert failures["top1_epochs3"] and "emnist100" in failures["top1_epochs3"][0]
    assert not failures["top2_epochs3"]


def test_the_fashion10_margin_is_on_the_mean_over_seeds():
    def accuracy(stream, seed, name):
        if stream == "fashion10" and name != "accumulate":
            return {10: 89.9, 11: 90.05, 12: 90.0}[seed]  # mean 89.983: within 0.05 of 90, one seed 0.1 below
        return 90.0

    chosen, failures = study.choose(_runs(accuracy, lambda name: 1.0))
    assert not any(failures.values()) and chosen in study.CANDIDATES

    def worse(stream, seed, name):
        return 89.9 if stream == "fashion10" and name == "top1" else 90.0  # mean 0.1 below

    chosen, failures = study.choose(_runs(worse, lambda name: 0.0 if name == "top1" else 1.0))
    assert chosen != "top1" and failures["top1"]


def test_no_candidate_qualifying_keeps_the_default_and_missing_runs_are_refused():
    chosen, failures = study.choose(_runs(lambda s, seed, n: 90.0 if n in ("accumulate", "head") else 80.0,
                                          lambda name: 1.0))
    assert chosen is None and all(failures.values())
    runs = _runs(lambda s, seed, n: 90.0, lambda name: 1.0)
    with pytest.raises(ValueError, match="validation runs missing"):
        study.choose([r for r in runs if not (r["stream"] == "emnist100" and r["row"] == "top2")])


def test_run_refuses_an_unknown_stream_or_preset_before_any_work(tmp_path):
    for argv in (["--stream", "nope"], ["--stream", "digits", "--preset", "nope"]):
        with pytest.raises(SystemExit):
            study.parse_args(["run", *argv, "--seed", "0", "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out" / "runs").exists()
    args = study.parse_args(["run", "--stream", "digits", "--preset", "smoke", "--seed", "0", "--out", str(tmp_path)])
    assert args.rows == list(study.ROWS)


def test_the_replay_study_reads_the_same_rule_with_its_own_candidates():
    from benchmarks.studies.learning_reuse import replay_every

    candidates = replay_every.CANDIDATES
    assert study.row("replay4", candidates)[2] == (("reuse", "accumulate"), ("update_replay_every", 4))
    assert study.row_name("accumulate_replay_16", candidates) == "replay16"
    with pytest.raises(ValueError, match="unknown row"):
        study.row("top1", candidates)
    runs = [{"stream": stream, "seed": seed, "row": name, "setup_cpu_seconds": 1.0,
             "cpu_seconds": {"replay4": 40.0, "replay16": 30.0}.get(name, 50.0),
             "average_accuracy": (0.8985 if (name, stream) == ("replay16", "emnist100") else 0.9)}
            for stream, seeds in study.VALIDATION.items() for seed in seeds
            for name in ("head", "accumulate", *candidates)]
    chosen, failures = study.choose(runs, candidates)
    assert chosen == "replay4" and set(failures) == set(candidates) and failures["replay16"]
    args = replay_every.parse_args(["run", "--stream", "fashion10", "--seed", "10", "--out", "x"])
    assert args.rows == ["head", "accumulate", "replay4", "replay16"]
