"""Tests for avalanche_sdr/plots: figures from a synthetic but realistic results JSON."""

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

import avalanche_sdr
from avalanche_sdr.plots import (
    MAX_TICK_LABELS,
    ResultsFormatError,
    load_results,
    make_all_plots,
    plot_complexity_heatmap,
    plot_consistency_heatmap,
    plot_detection_example,
    plot_memory,
    plot_task_accuracy,
    task_description,
    task_label,
)
from avalanche_sdr.plots.__main__ import main
from avalanche_sdr.plots.results import default_example_task, detection_grid, find_task

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
BACKBONE_MB = 0.27  # frozen E0
ENTRY_MB = 0.05  # one adapter set + one VAE
HEAD_MB = 0.0005  # one classification head


def build_results(n_groups=5, n_splits=3, seed=0, n_warm=3, miss_at=5, incorrect_at=8):
    """A results dict in the quickstart format, for a simulated SDR run.

    Tasks T_{k,r}: the first ``n_warm`` have distinct groups (warm start), the
    rest are a seeded permutation. Detection behaves well (p peaks and S dips on
    same-group entries, both votes agree) except at stream positions
    ``miss_at`` (a repeated task detected as new, if it is a repeat) and
    ``incorrect_at`` (mapped to another group's entry).
    """
    rng = np.random.default_rng(seed)
    pairs = [(k, r) for r in range(n_splits) for k in range(n_groups)]
    warm = pairs[:n_warm]
    rest = [pairs[i] for i in rng.permutation(np.arange(n_warm, len(pairs)))]
    entries = []  # (entry id, creator task, group)
    tasks, outcomes = [], []
    groups_seen = []
    for t, (k, r) in enumerate(warm + rest):
        record = {
            "task": t, "decision": "warm_start", "entry": len(entries), "reused_entry": None,
            "candidate_entries": [], "candidate_tasks": [], "consistency": [], "complexity": [],
            "vote_consistency": None, "vote_complexity": None, "rule": "warm_start",
            "detection_seconds": 0.0,
        }
        outcome = None
        if t >= n_warm:
            similar = np.array([g == k for _, _, g in entries], dtype=float)
            logits = 5.0 * similar + rng.normal(0, 0.7, len(entries))
            p = np.exp(logits - logits.max())
            p /= p.sum()
            s = 3.2 + rng.normal(0, 0.12, len(entries)) - 0.9 * similar
            vote_p, vote_s = int(np.argmax(p)), int(np.argmin(s))
            if t == incorrect_at:
                wrong = int(np.argmax(-similar + rng.random(len(entries)) * 0.1))
                vote_p = vote_s = wrong
                s[wrong] = s.min() - 0.2
            if t == miss_at and similar.any():
                vote_s = int(np.argmax(similar * -1 + (1 - similar) * rng.random(len(entries))))
                s[vote_s] = s.min() - 0.05
            reuse = vote_p == vote_s and (similar.any() or t == incorrect_at)
            record.update(
                candidate_entries=[e for e, _, _ in entries],
                candidate_tasks=[c for _, c, _ in entries],
                consistency=p.round(4).tolist(),
                complexity=s.round(4).tolist(),
                vote_consistency=entries[vote_p][0],
                vote_complexity=entries[vote_s][0],
                rule="agreement",
                detection_seconds=float(rng.uniform(0.5, 2.0)),
            )
            if reuse:
                record.update(decision="reuse", entry=entries[vote_p][0], reused_entry=entries[vote_p][0])
                outcome = "correct" if entries[vote_p][2] == k else "incorrect"
            else:
                record.update(decision="new")
                outcome = "miss" if k in groups_seen else "correct"
        if record["decision"] != "reuse":
            entries.append((record["entry"], t, k))
        groups_seen.append(k)
        outcomes.append(outcome)
        reused_creator = (
            next(c for e, c, _ in entries if e == record["reused_entry"])
            if record["decision"] == "reuse" else None
        )
        tasks.append({
            "task": t, "group": k, "split": r, "decision": record["decision"],
            "entry": record["entry"], "chosen_task": reused_creator, "outcome": outcome,
            "test_accuracy": float(rng.uniform(0.6, 0.75) if outcome == "incorrect" else rng.uniform(0.86, 0.99)),
            "memory_mb": BACKBONE_MB + ENTRY_MB * len(entries) + HEAD_MB * (t + 1),
            "detection": record,
        })
    scored = [o for o in outcomes if o is not None]
    n_tasks = len(tasks)
    return {
        "config": {"benchmark": "synthetic", "n_groups": n_groups, "n_splits": n_splits},
        "seed": seed,
        "detection": {
            "correct": scored.count("correct") / len(scored),
            "miss": scored.count("miss") / len(scored),
            "incorrect": scored.count("incorrect") / len(scored),
            "n_scored": len(scored),
        },
        "average_accuracy": float(np.mean([t["test_accuracy"] for t in tasks])),
        "memory_mb": tasks[-1]["memory_mb"],
        "memory_mb_all_new": BACKBONE_MB + (ENTRY_MB + HEAD_MB) * n_tasks,
        "unique_tasks": len(entries),
        "tasks": tasks,
    }


@pytest.fixture(scope="module")
def results():
    return build_results()


@pytest.fixture
def results_file(tmp_path, results):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    return path


def test_fixture_is_realistic(results):
    outcomes = [t["outcome"] for t in results["tasks"]]
    assert outcomes[:3] == [None, None, None]
    assert {"correct", "miss", "incorrect"} <= set(outcomes)
    assert any(t["decision"] == "reuse" for t in results["tasks"])
    assert results["unique_tasks"] < len(results["tasks"])


def test_make_all_plots_writes_pngs(tmp_path, results_file, results):
    paths = make_all_plots(results_file, tmp_path / "figs")
    first_reuse = default_example_task(results)
    assert first_reuse["decision"] == "reuse"
    assert [p.name for p in paths] == [
        "complexity_heatmap.png",
        "consistency_heatmap.png",
        f"detection_task{first_reuse['task']}.png",
        "memory.png",
        "task_accuracy.png",
    ]
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000, path


def test_detection_grid_layout(results):
    grid = detection_grid(results, "complexity")
    scored = [t for t in results["tasks"] if t["decision"] != "warm_start"]
    assert grid.values.shape == (len(scored), results["unique_tasks"])
    assert grid.row_labels == [task_label(t) for t in scored]
    # Entries created later than a row's task are blank.
    for i, task in enumerate(grid.rows):
        n_candidates = len(task["detection"]["candidate_entries"])
        assert not np.isnan(grid.values[i, :n_candidates]).any()
        assert np.isnan(grid.values[i, n_candidates:]).all()
        for j, entry in enumerate(grid.entries):
            creator = results["tasks"][entry_creator_task(results, entry)]
            assert grid.similar[i, j] == (creator["group"] == task["group"])
        if task["decision"] == "reuse":
            assert grid.entries[grid.chosen[i]] == task["detection"]["reused_entry"]
        else:
            assert grid.chosen[i] is None
        assert grid.entries[grid.vote[i]] == task["detection"]["vote_complexity"]


def entry_creator_task(results, entry):
    return next(
        t["task"] for t in results["tasks"] if t["decision"] != "reuse" and t["entry"] == entry
    )


def test_plot_functions_return_labelled_axes(results):
    for plot in (plot_complexity_heatmap, plot_consistency_heatmap, plot_detection_example,
                 plot_memory, plot_task_accuracy):
        ax = plot(results)
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel(), plot.__name__
    heat = plot_complexity_heatmap(results)
    assert len(heat.figure.axes) == 2  # heatmap + colour bar
    assert heat.figure.axes[1].get_ylabel().startswith("S(j, t)")


def test_complexity_spanning_decades_uses_log_colour_scale(results):
    wide = copy.deepcopy(results)
    for task in wide["tasks"]:
        task["detection"]["complexity"] = [10 ** (3 * v) for v in task["detection"]["complexity"]]
    heat = plot_complexity_heatmap(wide)
    assert "log scale" in heat.figure.axes[1].get_ylabel()
    assert "log scale" not in plot_complexity_heatmap(results).figure.axes[1].get_ylabel()
    panel = plot_detection_example(wide)
    assert panel.figure.axes[1].get_yscale() == "log"


def test_plots_draw_on_given_axes(results):
    fig = Figure(figsize=(12, 4))
    left, right = fig.subplots(1, 2)
    assert plot_memory(results, ax=left) is left
    label = task_label(results["tasks"][6])
    assert plot_detection_example(results, task=label, ax=right) is right


def test_memory_plot_uses_per_task_all_new_line(results):
    per_task = copy.deepcopy(results)
    for i, t in enumerate(per_task["tasks"]):
        t["memory_mb_all_new"] = BACKBONE_MB + (ENTRY_MB + HEAD_MB) * (i + 1)
    ax = plot_memory(per_task)
    labels = [line.get_label() for line in ax.get_lines()]
    assert "every task trained as new" in labels
    assert "% saved" in ax.get_title()


def test_task_naming_matches_the_results_table(results):
    task = results["tasks"][6]
    assert task_label(task) == f"task {task['task']}"
    assert task_description(task) == f"task {task['task']} (group {task['group']}, split {task['split']})"
    panel = plot_detection_example(results, task=task["task"])
    assert panel.get_title().startswith(f"Task {task['task']} (group {task['group']}, split {task['split']})")


def test_find_task_by_id_and_name(results):
    task = results["tasks"][6]
    assert find_task(results, task["task"]) is task
    assert find_task(results, str(task["task"])) is task
    assert find_task(results, task_label(task)) is task
    assert find_task(results, f" Task {task['task']} ") is task
    with pytest.raises(ResultsFormatError, match=r"no task with id 99; the results have ids 0 to 14"):
        find_task(results, 99)
    with pytest.raises(ResultsFormatError, match=r"no task with id 99"):
        find_task(results, "task 99")
    with pytest.raises(ResultsFormatError, match=r"cannot read task 'third'.*'task 14'"):
        find_task(results, "third")


def test_find_task_reads_the_legacy_label(results):
    task = results["tasks"][6]
    legacy = f"T{task['group'] + 1},{task['split'] + 1}"  # 1-based group and split
    assert find_task(results, legacy) is task
    with pytest.raises(ResultsFormatError, match=r"no task with group 8, split 8 .*'T9,9'.*0-based id"):
        find_task(results, "T9,9")


def test_warm_start_task_has_no_panel(results):
    with pytest.raises(ResultsFormatError, match="warm-start task"):
        plot_detection_example(results, task=0)


def test_missing_keys_give_clear_errors(results, tmp_path):
    bad = copy.deepcopy(results)
    del bad["tasks"][4]["group"]
    with pytest.raises(ResultsFormatError, match=r"results\['tasks'\]\[4\] is missing key\(s\) \['group'\]"):
        make_all_plots(bad, tmp_path)
    bad = copy.deepcopy(results)
    del bad["tasks"][5]["detection"]["complexity"]
    with pytest.raises(ResultsFormatError, match=r"\['detection'\] is missing key\(s\) \['complexity'\]"):
        plot_complexity_heatmap(bad)
    bad = copy.deepcopy(results)
    bad["tasks"][5]["detection"]["consistency"].pop()
    with pytest.raises(ResultsFormatError, match="candidate entries"):
        plot_consistency_heatmap(bad)
    bad = copy.deepcopy(results)
    bad["tasks"][2]["test_accuracy"] = 93.0
    with pytest.raises(ResultsFormatError, match=r"fraction in \[0, 1\]"):
        plot_task_accuracy(bad)
    bad = copy.deepcopy(results)
    bad["tasks"][3]["decision"] = "maybe"
    with pytest.raises(ResultsFormatError, match="'maybe'"):
        plot_memory(bad)
    with pytest.raises(ResultsFormatError, match="'tasks'"):
        load_results({"config": {}})
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_results(tmp_path / "nope.json")
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ResultsFormatError, match="not valid JSON"):
        load_results(tmp_path / "broken.json")


def test_warm_start_only_results_skip_detection_figures(results, tmp_path):
    warm_only = copy.deepcopy(results)
    warm_only["tasks"] = warm_only["tasks"][:3]
    with pytest.warns(UserWarning, match="detection figures skipped"):
        paths = make_all_plots(warm_only, tmp_path)
    assert [p.name for p in paths] == ["memory.png", "task_accuracy.png"]


def test_cli_main(tmp_path, results_file, results, capsys):
    label = task_label(results["tasks"][7])
    assert main([str(results_file), "--out", str(tmp_path / "cli"), "--task", label, "--dpi", "60"]) == 0
    printed = capsys.readouterr().out.split()
    assert f"detection_task{results['tasks'][7]['task']}.png" in printed[2]
    assert all(Path(p).stat().st_size > 0 for p in printed)
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "missing.json"), "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "missing.json" in capsys.readouterr().err


@pytest.mark.slow  # a fresh interpreter imports the whole package (~10-15 s on 2 cores)
def test_cli_module_entry_point(tmp_path, results_file):
    package_root = Path(avalanche_sdr.__path__[0]).parent
    env = dict(os.environ, PYTHONPATH=str(package_root), MPLBACKEND="Agg")
    done = subprocess.run(
        [sys.executable, "-m", "avalanche_sdr.plots", str(results_file), "--out", str(tmp_path / "m")],
        capture_output=True, text=True, env=env, cwd=package_root, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "m").glob("*.png"))) == 5


# -- readable at every stream length ---------------------------------------------------------

PLOTS = (plot_complexity_heatmap, plot_consistency_heatmap, plot_detection_example, plot_memory,
         plot_task_accuracy)
TICK_NAME = re.compile(r"task \d+|entry \d+|outcome")


@pytest.fixture(scope="module")
def streams():
    """Results of a 4-task and a 100-task stream (50 groups: ~50 entries, 97 scored rows)."""
    short = build_results(n_groups=2, n_splits=2, n_warm=2, miss_at=3, incorrect_at=99)
    long = build_results(n_groups=50, n_splits=2, n_warm=3, miss_at=40, incorrect_at=70)
    assert len(short["tasks"]) == 4 and len(long["tasks"]) == 100 and long["unique_tasks"] > 40
    return {4: short, 100: long}


def drawn_texts(fig):
    """Draw ``fig`` on an Agg canvas; its renderer and every text drawn (non-empty, visible)."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # runs the constrained layout
    not_drawn = set()  # tick labels of ticks outside the view, or spare tick objects
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            tolerance = 1e-9 * (high - low)
            for minor in (False, True):
                locs = axis.get_ticklocs(minor=minor)
                ticks = axis.get_minor_ticks() if minor else axis.get_major_ticks()
                for k, tick in enumerate(ticks):
                    if k >= len(locs) or not low - tolerance <= locs[k] <= high + tolerance:
                        not_drawn |= {id(tick.label1), id(tick.label2)}
    texts = [
        t for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and id(t) not in not_drawn
    ]
    return canvas.get_renderer(), texts


def tick_texts(axis):
    return [t.get_text() for t in axis.get_majorticklabels() if t.get_text()]


@pytest.mark.filterwarnings("error::UserWarning")  # e.g. "constrained layout not applied"
@pytest.mark.parametrize("n_tasks", [4, 100])
@pytest.mark.parametrize("plot", PLOTS, ids=lambda f: f.__name__)
def test_every_text_lies_inside_the_figure(streams, n_tasks, plot):
    fig = plot(streams[n_tasks]).figure
    renderer, texts = drawn_texts(fig)
    assert any(t.get_text() == fig.axes[0].get_title() for t in texts)
    inside = fig.bbox.padded(1.0)  # pixels
    cut = [
        (t.get_text()[:40], tuple(np.round(t.get_window_extent(renderer).extents)))
        for t in texts
        if not (inside.contains(*t.get_window_extent(renderer).p0)
                and inside.contains(*t.get_window_extent(renderer).p1))
    ]
    assert not cut, f"text cut at the figure edge {tuple(fig.bbox.extents)}: {cut}"


@pytest.mark.parametrize("n_tasks", [4, 100])
def test_task_ticks_use_one_name_and_are_thinned(streams, n_tasks):
    results = streams[n_tasks]
    task_axes = []
    for plot in PLOTS:
        ax = plot(results)
        task_axes.append(ax.xaxis)
        if plot in (plot_complexity_heatmap, plot_consistency_heatmap):
            task_axes.append(ax.yaxis)
    for axis in task_axes:
        labels = tick_texts(axis)
        assert labels and all(TICK_NAME.fullmatch(label) for label in labels), labels
        assert len(labels) <= MAX_TICK_LABELS + 1  # + the heatmaps' outcome column
    accuracy = plot_task_accuracy(results).xaxis
    names = [task_label(t) for t in results["tasks"]]
    if n_tasks <= MAX_TICK_LABELS:
        assert tick_texts(accuracy) == names
    else:  # every k-th task, from the first; minor ticks mark every task
        step = -(-n_tasks // MAX_TICK_LABELS)
        assert tick_texts(accuracy) == names[::step]
        ticked = set(accuracy.get_ticklocs()) | set(accuracy.get_ticklocs(minor=True))
        assert ticked == set(range(n_tasks))


def test_figures_grow_with_the_stream_within_bounds(streams):
    for plot in (plot_complexity_heatmap, plot_task_accuracy):
        small = plot(streams[4]).figure.get_size_inches()
        large = plot(streams[100]).figure.get_size_inches()
        assert (large >= small).all() and (large > small).any(), plot.__name__
        assert (small >= (7.5, 5.0)).all() and (large <= (16.0, 14.0)).all(), plot.__name__


def test_package_loads_matplotlib_only_when_a_figure_is_used():
    import avalanche_sdr.plots as package
    from avalanche_sdr.plots import figures

    assert sorted(package._FIGURE_NAMES) == sorted(figures.__all__)
    assert package.plot_memory is figures.plot_memory
    with pytest.raises(AttributeError, match="no attribute 'plot_nothing'"):
        package.plot_nothing  # noqa: B018
    package_root = Path(avalanche_sdr.__path__[0]).parent
    done = subprocess.run(
        [sys.executable, "-c", "import sys, avalanche_sdr.plots; print('matplotlib' in sys.modules)"],
        capture_output=True, text=True, cwd=package_root, timeout=120,
        env=dict(os.environ, PYTHONPATH=str(package_root)),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
