"""The study of docs/results/closed_form.md (``benchmarks/studies/closed_form/``): the page's tables
from run files, and the choice rules of the ``"kernel_lda"`` router, on hand-made runs.
Fast (no training)."""
import pytest
import torch

from benchmarks.studies.closed_form import offline, router, table


def _point(dim, gamma, shrinkage, accuracy):
    return {"point": {"dim": dim, "gamma_scale": gamma, "shrinkage": shrinkage}, "accuracy": accuracy,
            "memory_mb": dim * dim * 4 / 2**20, "combined": {"0.25": accuracy, "0.5": accuracy}}


def _study(stream, weighted, accuracies):
    points = [_point(d, g, s, a) for (d, g, s), a in zip([(512, 1.0, 0.01), (1024, 1.0, 0.01), (2048, 1.0, 0.01)],
                                                        accuracies)]
    return {"stream": stream, "seed": 0, "n": 100, "threads": 1, "lda_weighted": weighted, "points": points}


def test_the_router_with_fewer_features_is_chosen_within_half_a_point_and_adopted_only_if_never_below():
    runs = [_study("a", 70.0, [80.0, 80.8, 81.0]), _study("b", 90.0, [89.0, 89.4, 89.6])]
    decision = router.choose(runs)
    assert decision["means"] == pytest.approx([84.5, 85.1, 85.3])
    assert decision["best"] == 2 and decision["chosen"] == 1  # 1024 is within 0.5 of the best mean, 512 is not
    assert decision["per_stream"] == {"a": (80.8, 70.0), "b": (89.4, 90.0)}
    assert not decision["adopted"]  # below lda_weighted on b
    report = router.format_report(runs)
    assert "kernel_lda D=1024 gamma=1x s=0.01 (chosen)" in report and "D=2048 gamma=1x s=0.01 (best)" in report
    assert "Does not qualify" in report and "validation split of b" in report
    runs[1]["lda_weighted"] = 89.0
    assert router.choose(runs)["adopted"]


def test_the_router_grid_is_fixed_and_every_point_is_named():
    points = router.grid_points()
    assert len(points) == 27 and points[0] == {"dim": 512, "gamma_scale": 0.25, "shrinkage": 0.001}
    assert router.point_name(points[-1]) == "kernel_lda D=2048 gamma=4x s=0.1"


def _run(method, variant, seed, accuracy, memory=1.0, wall=10.0, **extra):
    run = {"run_id": f"s_cpu_{method}_{variant}_seed{seed}", "method": method, "variant": variant, "seed": seed,
           "stream": "s", "stream_label": "Stream", "preset": "cpu", "split": "test", "average_accuracy": accuracy,
           "memory_mb": memory, "wall_seconds": wall, "source": f"/somewhere/docs/results/x/{method}.json"}
    run.update(extra)
    return run


def _sdr(variant, seed, aware, free, kernel):
    routers = {"gaussian": 0.1, "expert_gate": 0.1, "kernel_lda": 2.0, "lda": 0.5, "lda_weighted": 0.5}
    return _run("sdr_task_free", variant, seed, aware, memory=4.0, wall=100.0,
                task_free={"lda_weighted": {"task_free": free}, "kernel_lda": {"task_free": kernel},
                           "lda": {"task_free": free}, "oracle": {"task_free": aware}},
                router_memory_mb=routers,
                router_fit_seconds={"gaussian": 1.0, "expert_gate": 2.0, "kernel_lda": 3.0, "lda": 4.0,
                                    "lda_weighted": 5.0})


def _runs():
    runs = []
    for seed in (0, 1):
        runs += [_sdr("accumulate", seed, 0.99, 0.77, 0.80), _sdr("", seed, 0.98, 0.76, 0.80),
                 _run("klda", "tuned", seed, 0.81, memory=17.0, task_aware={"average_accuracy": 0.98}),
                 _run("slda", "", seed, 0.75, task_aware={"average_accuracy": 0.985}),
                 _run("replay", "tuned", seed, 0.97), _run("ci_replay", "", seed, 0.68),
                 _run("joint", "", seed, 0.80, task_aware={"average_accuracy": 0.98})]
    runs.append(_run("replay", "tuned", 2, 0.95))  # no ci_replay run of seed 2: left out of the row
    return runs


def test_rows_read_each_learner_with_its_own_router_memory_and_wall():
    rows = {r["label"]: r for r in table.stream_rows(_runs(), "s")}
    sdr = rows["SDR recommended ([accumulate], router lda_weighted)"]
    # memory and wall without the other routers: lda shares lda_weighted's state and fit
    assert sdr["memory"] == [pytest.approx(4.0 - 0.1 - 0.1 - 2.0)] * 2
    assert sdr["wall"] == [pytest.approx(100.0 - 1.0 - 2.0 - 3.0)] * 2
    kernel = rows["SDR [accumulate], router kernel_lda"]
    assert kernel["free"] == [pytest.approx(80.0)] * 2 and kernel["memory"] == [pytest.approx(4.0 - 0.2 - 0.5)] * 2
    assert rows["klda (random Fourier features + LDA) [tuned]"]["aware"] == [pytest.approx(98.0)] * 2
    assert rows["slda (Avalanche StreamingLDA)"]["free"] == [pytest.approx(75.0)] * 2
    er = rows["ER [tuned] (task-free: ER class-incremental)"]
    assert er["seeds"] == [0, 1] and er["aware"] == [pytest.approx(97.0)] * 2 and er["free"] == [pytest.approx(68.0)] * 2


def test_the_stream_table_gives_ratios_to_joint_sources_and_the_targets():
    text = table.format_stream(_runs(), "s")
    assert "| SDR head-only, router lda_weighted | 98.00 ± 0.00 | 76.00 ± 0.00 |" in text
    assert "| 1.000 / 0.950 |" in text  # head-only: 98 / 98 and 76 / 80
    assert "`docs/results/x/klda.json`" in text and "/somewhere" not in text
    assert "SDR recommended task-aware 99.00 % against the best closed-form row's 98.50 % (slda): **met**" in text
    assert "router lda_weighted) task-free 77.00 % against 81.00 % (klda): **not met** (-4.00 points)" in text
    assert "SDR [accumulate], router kernel_lda task-free 80.00 % against 81.00 % (klda): **not met**" in text


class _E0(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model.batched_features(x, None)


def test_the_router_fitted_after_a_run_from_its_entry_map_answers_as_during_the_run(one_thread):
    """benchmarks/studies/closed_form/offline.py: the state and the scores of the router fitted
    during an SDR run, from the run's entry map, E0 and stream alone."""
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr import SDRStrategy, build_sdr_model
    from avalanche_sdr.benchmarks import MixedDigits
    from avalanche_sdr.evaluation import TaskFreeMetrics
    from avalanche_sdr.models import small_cnn_backbone
    from avalanche_sdr.routers import KernelLDARouter
    from avalanche_sdr.training import SDRSettings

    benchmark = MixedDigits(seed=1, original_class_ids=True)
    torch.manual_seed(0)
    model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(8, 16)), in_channels=1, image_size=8,
                            generator=None)
    during = KernelLDARouter(dim=48, gamma_scale=0.5, shrinkage=0.01)
    metric = TaskFreeMetrics((during,))
    strategy = SDRStrategy(model=model, settings=SDRSettings(new_task_epochs=1, reuse_epochs=1, train_mb_size=32),
                           detector="two_sample", routers=(during,),
                           evaluator=EvaluationPlugin(accuracy_metrics(experience=True), metric, loggers=[]))
    for experience in benchmark.train_stream:
        strategy.train(experience, eval_streams=[])
    strategy.eval(benchmark.test_stream)
    run = {"sdr_results": {"tasks": [{"task": t, "entry": model.entry_of(t)}
                                     for t in range(len(benchmark.train_stream))]}}
    after = KernelLDARouter(dim=48, gamma_scale=0.5, shrinkage=0.01)
    scored = offline.fit_and_score(run, benchmark, _E0(model), after)
    assert scored["task_free"] == pytest.approx(metric.result()["kernel_lda"]["task_free"], abs=1e-9)
    assert scored["routing"] == pytest.approx(metric.result()["kernel_lda"]["routing"], abs=1e-9)
    counter_bytes = sum(t.numel() * t.element_size() for state in during.state_modules(model) for t in state.buffers())
    assert scored["memory_mb"] == pytest.approx(counter_bytes / 2**20)


def _answers(folder, stream, kernel, weighted):
    import json

    (folder / f"{stream}_seed0.json").write_text(json.dumps(
        {"variants": {"kernel_tuned": {"unit": kernel}, "lda_weighted": {"unit": weighted}}}))


def _tuned(seed, kernel):
    """An [accumulate] run refitted after with kernel_lda at klda's settings (offline --settings klda)."""
    run = _sdr("accumulate", seed, 0.99, 0.77, kernel)
    run["run_id"] += "_kernel_klda"
    run["kernel_lda_fitted_after"] = {"settings": "klda", "router": {"name": "kernel_lda"}, "from": "x"}
    return run


def test_the_router_chosen_on_validation_is_read_from_the_runs_refitted_at_kldas_settings(tmp_path, monkeypatch):
    monkeypatch.setattr(table, "ANSWERS", tmp_path)
    runs = _runs() + [_tuned(0, 0.82), _tuned(1, 0.84)]
    _answers(tmp_path, "s", 83.0, 77.0)
    assert table.validation_choice("s") == (table.KLDA_CHOICE, 83.0, 77.0)
    rows = {r["label"]: r for r in table.stream_rows(runs, "s")}
    # the refitted runs make their own row and leave the plain rows alone
    assert rows["SDR [accumulate], router kernel_lda"]["free"] == [pytest.approx(80.0)] * 2
    assert rows["SDR [accumulate], router kernel_lda at klda's settings"]["free"] == [pytest.approx(82.0),
                                                                                      pytest.approx(84.0)]
    chosen = rows[f"SDR [accumulate], router chosen on validation ({table.KLDA_CHOICE})"]
    assert chosen["free"] == [pytest.approx(82.0), pytest.approx(84.0)]
    assert chosen["memory"] == [pytest.approx(4.0 - 0.1 - 0.1 - 0.5)] * 2  # kernel_lda's state kept, lda's not
    text = table.format_stream(runs, "s")
    assert f"router chosen on validation ({table.KLDA_CHOICE}) task-free 83.00 % against 81.00 % (klda): **met**" in text
    _answers(tmp_path, "s", 77.0, 77.0)  # a tie keeps the recommended router
    assert table.validation_choice("s")[0] == "lda_weighted"
    rows = {r["label"]: r for r in table.stream_rows(runs, "s")}
    assert rows["SDR [accumulate], router chosen on validation (lda_weighted)"]["free"] == [pytest.approx(77.0)] * 2
    assert table.validation_choice("absent") is None


def test_the_offline_refit_refuses_a_run_it_wrote_and_names_the_harness_file(tmp_path, monkeypatch):
    import json

    run = _tuned(0, 0.8)
    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "a.json").write_text(json.dumps({k: v for k, v in run.items() if k != "source"}))
    args = offline.parse_args(["--runs", str(tmp_path), "--out", str(tmp_path / "out"), "--settings", "klda"])
    with pytest.raises(SystemExit, match="written by this tool already; give the harness's run file"):
        offline.main(args)


def test_the_offline_refit_at_kldas_settings_reads_the_streams_tuning_file(tmp_path, monkeypatch):
    assert offline.router_for("s", "defaults") == offline_router()
    monkeypatch.setattr(router, "KLDA_TUNING", tmp_path)
    with pytest.raises(SystemExit, match="no klda tuning file"):
        offline.router_for("s", "klda")
    import json

    (tmp_path / "s" / "tuning").mkdir(parents=True)
    (tmp_path / "s" / "tuning" / "chosen_s_cpu.json").write_text(json.dumps(
        {"klda": {"options": {"klda_dim": 64, "klda_gamma": 0.5, "klda_shrinkage": 0.01}}}))
    assert offline.router_for("s", "klda").options() == {"dim": 64, "gamma_scale": 0.5, "shrinkage": 0.01}


def offline_router():
    from avalanche_sdr.routers import KernelLDARouter

    return KernelLDARouter()
