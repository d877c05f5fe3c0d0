"""The route-then-head study of ``benchmarks/studies/closed_form/router.py`` (``--answer``):
task scores from unit log-posteriors, the answers, the qualification rule fixed before
its runs and its report, on hand-made repositories and runs. Fast (no training)."""
import math

import pytest
import torch

from benchmarks.studies.closed_form import router


class _Heads:
    """What the study reads of a repository's heads: class ids, trained, and logits that
    put the answer on a fixed class per task."""

    def __init__(self, ids, answer):
        self.ids, self.answer = ids, answer

    def is_trained(self, task):
        return task in self.ids

    def class_ids(self, task):
        return list(self.ids[task])

    def logits(self, task, features):
        out = torch.full((features.shape[0], 10), -1.0)
        out[:, self.answer[task]] = 1.0
        return out


class _Repository:
    """Three tasks: 0 and 2 on entry 0 (classes 1, 2), 1 on entry 1 (classes 3, 4)."""

    def __init__(self):
        self.task_to_entry = {0: 0, 1: 1, 2: 0}
        self.heads = _Heads({0: [1, 2], 1: [3, 4], 2: [1, 2]}, {0: 1, 1: 4, 2: 2})

    def entry_of(self, task):
        return self.task_to_entry[task]


# units: (task, entry, class id); entry 0 has classes 1, 2; entry 1 has 3, 4
TABLE = torch.tensor([[2, 0, 1], [2, 0, 2], [1, 1, 3], [1, 1, 4]])


def test_a_task_scores_the_log_sum_exp_of_its_units_and_ties_go_to_the_latest_task():
    logp = torch.log(torch.tensor([[0.3, 0.3, 0.4, 0.0], [0.05, 0.05, 0.5, 0.4]]))
    scores, tasks = router.task_scores(_Repository(), logp, TABLE)
    assert tasks == [2, 1, 0]
    assert scores[0].tolist() == pytest.approx([math.log(0.6), math.log(0.4), math.log(0.6)])
    assert scores[1].tolist() == pytest.approx([math.log(0.1), math.log(0.9), math.log(0.1)])
    assert scores.argmax(1).tolist() == [0, 1]  # sample 0: tasks 2 and 0 tie, the latest (2) is first


def test_the_head_answers_where_the_unit_would_answer_another_class():
    # sample 0: best unit (1, 3) but the entry-0 task scores higher; its head (task 2) says class 2
    logp = torch.log(torch.tensor([[0.3, 0.3, 0.4, 0.0], [0.05, 0.05, 0.5, 0.4]]))
    x = torch.zeros(2, 1, 2, 2)
    features = {0: torch.zeros(2, 4), 1: torch.zeros(2, 4)}
    y = torch.tensor([2, 3])
    scored = router.answers(_Repository(), x, y, logp, TABLE, features)
    assert scored["unit"] == pytest.approx(50.0)  # units: class 3 (wrong), class 3 (right)
    assert scored["head"] == pytest.approx(50.0)  # heads: task 2 -> 2 (right), task 1 -> 4 (wrong)
    assert scored["head_task_has_class"] == pytest.approx(100.0)


def _variants(weighted, kernel_unit, kernel_head, combined_head):
    return {"lda_weighted": {"unit": weighted, "head": weighted, "head_task_has_class": weighted},
            "kernel": {"unit": kernel_unit, "head": kernel_head, "head_task_has_class": kernel_head},
            "combined": {"unit": kernel_unit, "head": combined_head, "head_task_has_class": combined_head}}


def _run(stream, variants):
    return {"stream": stream, "seed": 0, "n": 100, "threads": 1, "variants": variants,
            "settings": {"kernel": {"dim": 2048}}, "train_seconds": 10.0, "wall_seconds": 20.0,
            "load_start": 1.0, "load_end": 2.0}


def test_a_variant_qualifies_only_at_least_as_good_as_lda_weighted_and_above_the_kernel_unit_everywhere():
    runs = [_run("a", _variants(70.0, 80.0, 81.0, 85.0)), _run("b", _variants(90.0, 85.0, 86.0, 91.0))]
    decision = router.answer_qualifies(runs)
    assert decision["combined head"]  # >= 70, 90 and > 80, 85
    assert not decision["kernel head"]  # 86 < lda_weighted's 90 on b
    assert not decision["kernel unit"] and not decision["lda_weighted unit"]
    assert not decision["kernel_tuned head"]  # not run: cannot qualify
    runs[0]["variants"]["combined"]["head"] = 80.0  # equal to the kernel unit: not above it
    assert not router.answer_qualifies(runs)["combined head"]


def test_the_report_has_every_variant_with_its_verdict_and_the_runs_wall_and_load():
    runs = [_run("b", _variants(90.0, 85.0, 86.0, 91.0)), _run("a", _variants(70.0, 80.0, 81.0, 85.0))]
    report = router.format_answer_report(runs)
    assert "| a seed 0 (100 images) | b seed 0 (100 images) |" in report  # sorted by stream
    assert "| combined | head | 85.00 (85.0) | 91.00 (91.0) | yes |" in report
    assert "| lda_weighted (recommended router) | unit | 70.00 | 90.00 | no |" in report
    assert "| kernel_tuned | unit | – | – | no |" in report
    assert "a seed 0 10 / 20 s, load 1.0 / 2.0" in report
    assert len([line for line in report.splitlines() if line.startswith("| ") and " | " in line]) == 1 + 10


def test_the_klda_settings_are_read_from_the_baseline_s_tuning_file(tmp_path, monkeypatch):
    folder = tmp_path / "s" / "tuning"
    folder.mkdir(parents=True)
    (folder / "chosen_s_cpu.json").write_text(
        '{"klda": {"options": {"klda_dim": 512, "klda_gamma": 0.0625, "klda_shrinkage": 0.01}}}')
    monkeypatch.setattr(router, "KLDA_TUNING", tmp_path)
    assert router.klda_settings("s") == {"dim": 512, "gamma_scale": 0.0625, "shrinkage": 0.01}
    assert router.klda_settings("absent") is None
