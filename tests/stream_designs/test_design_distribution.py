"""The draw of stream designs: deterministic per seed, within the documented ranges, with every feature the
distribution promises appearing across seeds; the ground truth; the fixed seed ranges and the committed list.
No data is read."""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.stream_designs import distribution as dist
from benchmarks.stream_designs.distribution import (
    check_design,
    draw_design,
    ground_truth,
    nested_tasks,
    repeat_features,
    size_bin,
)
from benchmarks.stream_designs.report import designs_page

ROOT = Path(__file__).resolve().parents[2]
SEEDS = range(300)


@pytest.fixture(scope="module")
def designs():
    return [draw_design(seed) for seed in SEEDS]


def test_a_design_is_the_same_for_the_same_seed_and_json_safe():
    first, again = draw_design(7), draw_design(7)
    assert first == again
    assert json.loads(json.dumps(first)) == first
    assert draw_design(8) != first


def test_every_design_lies_within_the_documented_ranges(designs):
    for d in designs:
        check_design(d)
        facts = dist.SOURCE_FACTS[d["source"]]
        tasks, groups = d["tasks"], d["groups"]
        assert d["source"] in dist.SOURCES and d["image_shape"] == facts["shape"]
        assert len(groups) <= dist.MAX_GROUPS and len(tasks) <= dist.MAX_TASKS
        assert len(groups) >= dist.MIN_GROUPS or d["source"] == "digits"  # step 4 may drop digits' groups
        assert all(dist.MIN_CLASSES <= len(g["classes"]) <= dist.MAX_CLASSES for g in groups)
        assert all(dist.MIN_TIMES_SEEN <= g["times_seen"] <= dist.MAX_TIMES_SEEN for g in groups)
        assert Counter(t["group"] for t in tasks) == {g["group"]: g["times_seen"] for g in groups}
        assert all(g["balance_ratio"] == 1.0 or dist.MIN_RATIO <= g["balance_ratio"] <= dist.MAX_RATIO for g in groups)
        used = Counter()
        for t in tasks:
            counts = t["train_per_class"]
            assert all(dist.MIN_PER_CLASS <= n <= dist.MAX_PER_CLASS for n in counts)
            # Never past 90/10; near the group's ratio up to rounding (counts of 10 or more: 5 % each).
            assert max(counts) <= dist.MAX_RATIO * min(counts)
            assert max(counts) / min(counts) <= groups[t["group"]]["balance_ratio"] * 1.05 / 0.95 + 1e-9
            assert t["size_bin"] == size_bin(sum(counts) / len(counts))
            assert t["test_per_class"] == [min(dist.TEST_PER_CLASS, facts["test"][v]) for v in t["classes"]]
            for v, n in zip(t["classes"], counts):
                used[v] += n
        assert all(used[v] <= facts["train"][v] for v in used), "a class's tasks ask more images than it holds"
        assert sum(used.values()) <= dist.MAX_TRAIN_IMAGES
        assert d["source"] == dist.SOURCES[d["seed"] % 4]
        assert d["n_warm_start"] == dist.N_WARM_START and d["e0"]["in_channels"] == facts["shape"][0]


def test_the_features_of_the_distribution_appear_across_seeds(designs):
    sources = Counter(d["source"] for d in designs)
    assert set(sources) == set(dist.SOURCES)
    assert {len(g["classes"]) for d in designs for g in d["groups"]} == set(range(2, 6))
    assert {g["times_seen"] for d in designs for g in d["groups"]} == set(range(1, 6))
    assert min(len(d["groups"]) for d in designs) == 3 and max(len(d["groups"]) for d in designs) == 20
    assert max(len(d["tasks"]) for d in designs) == dist.MAX_TASKS
    bins = Counter(t["size_bin"] for d in designs for t in d["tasks"])
    assert all(bins[name] > 100 for name, _, _ in dist.SIZE_BINS)
    assert sum(bool(nested_tasks(d)) for d in designs) > 250
    features = [repeat_features(d) for d in designs]
    assert sum(f["flipped"] > 0 for f in features) > 250 and sum(f["permuted"] > 0 for f in features) > 250
    ratios = [g["balance_ratio"] for d in designs for g in d["groups"]]
    assert min(r for r in ratios if r > 1) < 2 and max(ratios) > 8.5
    assert 0.15 < sum(r == 1.0 for r in ratios) / len(ratios) < 0.35
    # Both kinds of nesting: a subset of an earlier group and a superset of one.
    kinds = set()
    for d in designs:
        for k, g in enumerate(d["groups"]):
            for other in d["groups"][:k]:
                mine, theirs = set(g["classes"]), set(other["classes"])
                kinds |= {"subset"} if mine < theirs else {"superset"} if mine > theirs else set()
    assert kinds == {"subset", "superset"}


def test_the_budget_drops_late_repeats_and_keeps_the_stream_consistent():
    # Designs that met the budget: their groups are renumbered 0..G-1 and every kept task keeps its occurrence.
    over = [d for d in map(draw_design, range(60)) if sum(sum(t["train_per_class"]) for t in d["tasks"]) > 7000]
    assert over, "no design near the budget among the first 60 seeds"
    for d in over:
        check_design(d)
        assert [g["group"] for g in d["groups"]] == list(range(len(d["groups"])))
        assert len({t["group"] for t in d["tasks"]}) == len(d["groups"])


def test_repeats_flip_the_balance_and_may_reorder_the_labels():
    d = next(d for d in map(draw_design, SEEDS) if repeat_features(d)["flipped"])
    tasks = d["tasks"]
    for g in d["groups"]:
        mine = [t for t in tasks if t["group"] == g["group"]]
        assert [t["occurrence"] for t in mine] == list(range(len(mine)))
        assert [t["flipped"] for t in mine] == [r % 2 == 1 and g["balance_ratio"] > 1 for r in range(len(mine))]
    flipped = next(t for t in tasks if t["flipped"] and max(t["train_per_class"]) > 2 * min(t["train_per_class"]))
    first = next(t for t in tasks if t["group"] == flipped["group"] and t["occurrence"] == 0)
    count = {v: n for v, n in zip(flipped["classes"], flipped["train_per_class"])}
    count_first = {v: n for v, n in zip(first["classes"], first["train_per_class"])}
    assert max(count, key=count.get) == min(count_first, key=count_first.get)


def test_the_warm_start_tasks_are_of_distinct_groups(designs):
    assert all(len({t["group"] for t in d["tasks"][:3]}) == 3 for d in designs)


def test_ground_truth_is_the_class_set_whatever_the_order():
    design = {"groups": [{"group": 0, "classes": [1, 2]}, {"group": 1, "classes": [1, 2, 3]},
                         {"group": 2, "classes": [4, 5]}],
              "tasks": [{"position": 0, "classes": [2, 1]}, {"position": 1, "classes": [1, 2, 3]},
                        {"position": 2, "classes": [1, 2]}, {"position": 3, "classes": [5, 4]},
                        {"position": 4, "classes": [3, 2, 1]}]}
    assert ground_truth(design) == [0, 1, 0, 2, 1]
    # Task 1 is a superset of task 0; task 2 a subset of task 1; task 4 a superset of task 2.
    assert nested_tasks(design) == [1, 2, 4]


def test_check_design_names_what_is_wrong():
    d = draw_design(3)
    broken = json.loads(json.dumps(d))
    broken["tasks"][4]["classes"] = broken["tasks"][4]["classes"][:-1]
    with pytest.raises(ValueError, match="task 4: classes"):
        check_design(broken)
    broken = json.loads(json.dumps(d))
    broken["tasks"][1]["group"] = broken["tasks"][0]["group"]
    with pytest.raises(ValueError):
        check_design(broken)
    with pytest.raises(ValueError, match="missing"):
        check_design({k: v for k, v in d.items() if k != "e0"})
    with pytest.raises(ValueError, match="non-negative"):
        draw_design(-1)


def test_size_bins_cover_10_to_300_and_nothing_else():
    assert [size_bin(v) for v in (10, 29.9, 30, 99.5, 100, 300)] == ["10-29", "10-29", "30-99", "30-99", "100-300",
                                                                     "100-300"]
    for bad in (9.9, 300.5):
        with pytest.raises(ValueError):
            size_bin(bad)


def test_the_seed_ranges_are_fixed_and_disjoint():
    assert dist.VALIDATION_SEEDS == tuple(range(0, 30)) and dist.REPORT_SEEDS == tuple(range(1000, 1030))
    assert dist.NEXT_REPORT_SEEDS == tuple(range(2000, 2030))
    assert dist.SECOND_VALIDATION_SEEDS == tuple(range(30, 60))
    assert dist.THIRD_VALIDATION_SEEDS == tuple(range(60, 120)) and dist.THIRD_REPORT_SEEDS == tuple(range(3000, 3060))
    assert dist.FOURTH_VALIDATION_SEEDS == tuple(range(120, 220))
    assert dist.FOURTH_REPORT_SEEDS == tuple(range(4000, 4100))
    assert dist.FIFTH_VALIDATION_SEEDS == tuple(range(220, 320))
    assert dist.REPORT_RANGES == (dist.REPORT_SEEDS, dist.NEXT_REPORT_SEEDS, dist.THIRD_REPORT_SEEDS,
                                  dist.FOURTH_REPORT_SEEDS)
    ranges = (dist.VALIDATION_SEEDS, dist.REPORT_SEEDS, dist.NEXT_REPORT_SEEDS, dist.SECOND_VALIDATION_SEEDS,
              dist.THIRD_VALIDATION_SEEDS, dist.THIRD_REPORT_SEEDS, dist.FOURTH_VALIDATION_SEEDS,
              dist.FOURTH_REPORT_SEEDS, dist.FIFTH_VALIDATION_SEEDS)
    assert sum(len(r) for r in ranges) == len(set().union(*ranges))


def test_the_committed_list_of_report_designs_is_the_draw():
    page = (ROOT / "docs" / "results" / "stream_designs" / "designs.md").read_text()
    assert page == designs_page(dist.REPORT_SEEDS, "Report designs")
    page = (ROOT / "docs" / "results" / "stream_designs" / "designs_next.md").read_text()
    assert page == designs_page(dist.NEXT_REPORT_SEEDS, "Next report designs",
                                "--seeds next_report --out docs/results/stream_designs/designs_next.md")
    page = (ROOT / "docs" / "results" / "stream_designs" / "designs_validation2.md").read_text()
    assert page == designs_page(dist.SECOND_VALIDATION_SEEDS, "Second validation designs",
                                "--seeds validation2 --out docs/results/stream_designs/designs_validation2.md")
    for seeds, title, word, name in ((dist.THIRD_VALIDATION_SEEDS, "Third validation designs", "validation3",
                                      "designs_validation3.md"),
                                     (dist.THIRD_REPORT_SEEDS, "Third report designs", "third_report",
                                      "designs_third_report.md"),
                                     (dist.FOURTH_VALIDATION_SEEDS, "Fourth validation designs", "validation4",
                                      "designs_validation4.md"),
                                     (dist.FOURTH_REPORT_SEEDS, "Fourth report designs", "fourth_report",
                                      "designs_fourth_report.md"),
                                     (dist.FIFTH_VALIDATION_SEEDS, "Fifth validation designs", "validation5",
                                      "designs_validation5.md")):
        page = (ROOT / "docs" / "results" / "stream_designs" / name).read_text()
        assert page == designs_page(seeds, title, f"--seeds {word} --out docs/results/stream_designs/{name}")


def test_the_results_page_states_the_distribution_as_drawn():
    page = " ".join((ROOT / "docs" / "results" / "stream_designs.md").read_text().split())
    assert " ".join(dist.DISTRIBUTION.split()) in page
    assert f"version {dist.DESIGN_VERSION}" in page


def test_the_package_docstring_names_every_range():
    import benchmarks.stream_designs as package

    doc = " ".join(package.__doc__.split())
    for text in ("3 to 20", "2 to 5 classes", "1 to 5 times", "at most 40 tasks", "10 to 300 training images",
                 "90/10", "0-29", "1000-1029"):
        assert text in doc, text
    assert re.search(r"subset or superset", doc)
