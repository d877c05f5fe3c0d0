"""The harness's closed-form rows (issue #47): ``slda``, ``ranpac`` and ``klda`` on the
SAME E0 as every row, each run scored task-free (its one head over the class ids) and
task-aware (the same head given the task label) with its memory, in the run JSON and in
``table2.md``. One harness call on the digits stream (smoke preset, seed 0): seconds.
"""
import json

import pytest

from benchmarks.table2 import command as table2
from benchmarks.table2 import tuning
from benchmarks.table2.report import format_task_free_table
from benchmarks.table2.methods import METHODS, PRESETS

CLOSED_FORM = ["slda", "ranpac", "klda"]


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    out = tmp_path_factory.mktemp("closed_form_rows")
    table2.main(table2.parse_args(["--stream", "digits", "--preset", "smoke", "--seeds", "0", "--methods",
                                   *CLOSED_FORM, "--no-plots", "--out", str(out)]))
    return out, {r["method"]: r for r in json.loads((out / "runs.json").read_text())}


def test_every_row_reports_task_aware_and_task_free_accuracy_and_memory(harness):
    out, runs = harness
    assert set(runs) == set(CLOSED_FORM)
    for name, run in runs.items():
        assert METHODS[name].task_free and not METHODS[name].is_sdr
        free, aware = run["task_free"]["self"]["task_free"], run["task_aware"]["average_accuracy"]
        assert free == run["average_accuracy"] and 0.5 < free <= aware <= 1.0, name  # 10 classes, 2 a task
        assert len(run["task_aware"]["task_accuracies"]) == len(run["task_accuracies"])
        assert run["memory_mb"] > 0 and run["group_curve"] and run["split"] == "test"
    # one E0 for all: the same file, and the random maps drawn with the stream's seed
    assert len(list((out / "backbones").iterdir())) == 1
    table = (out / "table2.md").read_text()
    assert "| Method | Task-aware acc (%) | Task-free acc (%) | Mem (MB) | Wall (s) | Seeds |" in table
    for run in runs.values():
        aware = 100 * run["task_aware"]["average_accuracy"]
        line = next(line for line in table.splitlines() if line.startswith(f"| {run['label']} | {aware:.2f}"))
        assert f"| {100 * run['average_accuracy']:.2f} ± 0.00 | {run['memory_mb']:.2f} ± 0.00 |" in line


def test_the_table_of_both_accuracies_is_left_out_without_task_free_rows(harness):
    _, runs = harness
    other = dict(runs["slda"], method="finetune", label="Finetune")
    del other["task_free"], other["task_aware"]
    assert format_task_free_table([other]) == ""
    old = dict(runs["slda"])
    del old["task_aware"]  # a one-head run file from before the task-aware score: "–"
    assert "| – |" in format_task_free_table([old])


def test_their_settings_have_grids_that_hold_the_presets_values():
    for name in CLOSED_FORM:
        grid, notes = tuning.resolved_grid(name, "cpu")
        for field, values in grid.items():
            assert field.startswith(name + "_") and getattr(PRESETS["cpu"].baselines, field) in values
    assert tuning.TUNING_GRIDS["klda"]["klda_dim"].high == tuning.TUNING_GRIDS["ranpac"]["ranpac_dim"].high == 2048
