"""benchmarks.studies.where_the_time_goes.cost (issue #38's benchmark): its ratios and tables come from the measured
values it is given, and, slow (``-m slow``), the ``--quick`` run writes a report of that
structure. Nothing here is timed: the test checks structure and arithmetic, not speed.
"""
import json

import pytest

from benchmarks.studies.where_the_time_goes import cost


def _run(method, variant, label, wall, cpu, setup=1.0, evaluated=None, curve=None, test=100, tasks=4):
    return {"method": method, "variant": variant, "label": label, "wall_seconds": wall, "cpu_seconds": cpu,
            "setup_cpu_seconds": setup, "average_accuracy": 0.5, "task_accuracies": [0.5] * tasks,
            "evaluated_experiences": evaluated, "group_curve": curve, "evaluation_seconds": 2.0,
            "task_sizes": [{"train": 10, "valid": 2, "test": test}] * tasks,
            "loadavg_before": [1.0, 1.0, 1.0], "loadavg_after": [2.0, 2.0, 2.0]}


def _runs():
    curve = [{"evaluated": [0]}, {"evaluated": [1]}, {"evaluated": [0, 2]}, {"evaluated": [1, 3]}]
    return [
        _run("finetune", "", "Finetune", wall=10.0, cpu=9.0),
        _run("sdr_two_sample_nogen", "", "SDR", wall=6.0, cpu=5.0, evaluated={"group": 4, "final": 4}, curve=curve),
        _run("sdr_two_sample_nogen", "accumulate", "SDR [accumulate]", wall=9.0, cpu=7.0,
             evaluated={"group": 5, "final": 4}, curve=curve),
    ]


def test_ratios_are_quotients_of_the_measured_seconds():
    rows = {(r["row"], r["against"]): r for r in cost.ratios(_runs())}
    assert set(rows) == {("SDR", "Finetune"), ("SDR [accumulate]", "Finetune"), ("SDR [accumulate]", "SDR")}
    assert rows["SDR", "Finetune"]["wall"] == pytest.approx(6.0 / 10.0)
    # CPU seconds less the stream's setup (1 s each)
    assert rows["SDR", "Finetune"]["cpu"] == pytest.approx(4.0 / 8.0)
    assert rows["SDR [accumulate]", "SDR"]["wall"] == pytest.approx(9.0 / 6.0)
    assert rows["SDR [accumulate]", "SDR"]["cpu"] == pytest.approx(6.0 / 4.0)


def test_top_layer_rows_are_added_and_compared_with_head_only():
    args = cost.parse_args(["--quick", "--top-layers", "1", "2", "--skip-task-free"])
    rows = cost.chosen_rows(args)
    assert [r[0] for r in rows][:3] == ["finetune", "sdr_two_sample_nogen", "sdr_two_sample_nogen"]
    assert "sdr_task_free" not in [r[0] for r in rows]
    assert rows[-1] == ("sdr_two_sample_nogen", "accumulate_top_2", (("reuse", "accumulate"), ("update_top_layers", 2)))
    runs = _runs() + [_run("sdr_two_sample_nogen", "accumulate_top_1", "SDR [accumulate_top_1]", wall=7.0, cpu=6.0)]
    found = {(r["row"], r["against"]): r for r in cost.ratios(runs)}
    assert found["SDR [accumulate_top_1]", "SDR"]["cpu"] == pytest.approx(5.0 / 4.0)
    assert not cost.is_accumulate("") and cost.is_accumulate("accumulate_top_3")
    with pytest.raises(SystemExit):
        cost.parse_args(["--top-layers", "0"])


def test_ratios_need_the_finetune_run():
    with pytest.raises(ValueError, match="finetune"):
        cost.ratios(_runs()[1:])


def test_evaluations_count_against_the_stream_length():
    rows = cost.evaluations(_runs())
    assert [r["row"] for r in rows] == ["SDR", "SDR [accumulate]"]  # Finetune has no counts
    head = rows[0]
    assert (head["tasks"], head["group"], head["final"]) == (4, 4, 4)
    assert head["per_task"] == pytest.approx(2.0)
    assert head["every_task"] == 1 + 1 + 2 + 2 + 4  # the group curve's sizes, then the whole test stream
    assert head["evaluation_images_per_second"] == pytest.approx(100 * 4 / 2.0)
    unequal = _runs()[1]
    unequal["task_sizes"] = [{"test": 100}, {"test": 90}, {"test": 100}, {"test": 100}]
    assert cost.evaluations([unequal])[0]["evaluation_images_per_second"] is None


def test_markdown_prints_the_measured_values():
    runs = _runs()
    report = {"stream": "digits", "preset": "smoke", "seed": 0, "loadavg_before": [1.0, 2.0, 3.0],
              "loadavg_after": [1.5, 2.0, 3.0], "runs": runs, "ratios": cost.ratios(runs),
              "evaluations": cost.evaluations(runs), "router_runs": [], "router": "lda_weighted",
              "router_fit": [{"entries": 4, "fit_s": 0.25, "fit_after_detection_s": 0.175, "evidence_s": 0.125,
                              "refit_s": 0.2}],
              "throughput": {"images": 64, "train_mb_size": 32, "eval_mb_size": 64, "train_images_per_second": 500.0,
                             "train_images_per_cpu_second": 600.0, "evaluation_images_per_second": 4000.0,
                             "evaluation_images_per_cpu_second": 5000.0},
              "environment": {"torch_threads": 1, "device": "cpu", "cpu_model": "x", "cpu_count": 2, "torch": "t"}}
    text = cost.markdown(report)
    assert "| SDR [accumulate] | SDR | 1.50 | 1.50 |" in text
    assert "| SDR | Finetune | 0.60 | 0.50 |" in text
    assert "| 4 | 0.250 | 0.175 | 0.125 | 0.200 |" in text
    assert "training a new entry 500 (600) at batch 32" in text


def test_quick_is_the_digits_smoke_stream_and_refuses_another_stream():
    args = cost.parse_args(["--quick"])
    assert (args.stream, args.preset, args.entries) == ("digits", "smoke", list(cost.QUICK_ENTRY_COUNTS))
    assert cost.parse_args([]).stream == "fashion10"
    for argv in (["--quick", "--stream", "fashion10"], ["--entries", "1", "4"]):
        with pytest.raises(SystemExit) as err:
            cost.parse_args(argv)
        assert err.value.code == 2


@pytest.mark.slow
def test_quick_run_writes_a_report_of_measured_runs(tmp_path):
    out = tmp_path / "cost"
    cost.main(cost.parse_args(["--quick", "--entries", "2", "--out", str(out)]))
    report = json.loads((out / "cost.json").read_text())
    assert [(r["method"], r["variant"]) for r in report["runs"]] == [(m, v) for m, v, _ in cost.ROWS]
    for run in report["runs"]:
        assert run["wall_seconds"] > 0 and run["cpu_seconds"] > run["setup_cpu_seconds"] > 0
        assert (out / "runs" / f"{run['run_id']}.json").exists()
    assert report["ratios"] == cost.ratios(report["runs"])
    head = report["evaluations"][0]
    assert head["group"] + head["final"] == sum(report["runs"][1]["evaluated_experiences"].values())
    assert head["final"] == head["tasks"] == len(report["runs"][1]["task_accuracies"])
    assert [r["entries"] for r in report["router_fit"]] == [2]
    assert report["router_fit"][0]["fit_s"] > 0 and report["router_fit"][0]["evidence_s"] > 0
    assert 0 < report["router_fit"][0]["fit_after_detection_s"]
    assert report["throughput"]["train_images_per_second"] > 0
    assert {r["router"] for r in report["router_runs"]} >= {"lda_weighted"}
    assert report["environment"]["torch_threads"] == 1
    assert (out / "cost.md").read_text().startswith("# Where the time goes: digits")


def test_router_fit_times_the_fit_alone_and_after_detection_and_refuses_no_rounds():
    from benchmarks.studies.where_the_time_goes.router_fit import router_fit_seconds

    row, = router_fit_seconds([2], images=8, rounds=2)
    assert row["entries"] == 2 and row["fit_s"] > 0 and row["fit_after_detection_s"] > 0
    assert row["evidence_s"] > 0 and row["refit_s"] > 0
    with pytest.raises(ValueError, match="rounds must be a positive int"):
        router_fit_seconds([2], images=8, rounds=0)
