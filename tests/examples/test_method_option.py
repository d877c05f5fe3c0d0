"""What every example shows and takes: ``--method`` and the budget names of the library's
registries, the harness's task sizes, a legend that matches the run, the method visible
in each paper-stream script, and the offline way to EMNIST.

In this process, without training: the scripts' parsers and sources, ``_common``'s
tables against the library's and the harness's registries, a strategy built (not
trained) on MixedDigits for the legend, and the EMNIST loader on a fake root.
"""
import re

import pytest

from benchmarks.studies.where_the_time_goes.cli_startup import REPO_ROOT

EXAMPLES = ("quickstart", "fashion_mnist", "fashion_mnist_50", "emnist_100", "cifar10_10", "cifar100_40")
PAPER_STREAM_EXAMPLES = EXAMPLES[1:]


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_takes_method_and_the_registry_budgets(examples, name, capsys):
    parse_args = examples[name]["parse_args"]
    args = parse_args([])
    assert (args.method, args.preset, args.detector) == ("paper", "cpu", None)
    assert parse_args(["--method", "recommended", "--preset", "cpu_large_task"]).method == "recommended"
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--method", "best"])
    assert exit_info.value.code == 2
    capsys.readouterr()
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--method {paper,recommended}" in text and "--preset {cpu,cpu_large_task,paper}" in text
    assert "cpu (CPU_SETTINGS" in text and "cpu_large_task (CPU_LARGE_TASK_SETTINGS" in text  # budget X: X_SETTINGS
    assert "--detector {agreement,calibrated,two_sample,expert_gate,small_task}" in text
    assert "--decision" not in text and "--no-generators" not in text


@pytest.mark.parametrize("name", PAPER_STREAM_EXAMPLES)
def test_each_paper_stream_example_shows_the_method(name):
    """The strategy call, Avalanche's own baselines and the loop are in the script itself."""
    source = (REPO_ROOT / "examples" / f"{name}.py").read_text(encoding="utf-8")
    for shown in ("SDRStrategy.from_benchmark(", "method=args.method", "settings=args.preset", "EWC(", "Replay(",
                  "pretrain_backbone(", "run_sdr_stream(", "for experience in benchmark.train_stream:",
                  "final_test_accuracies(", "repository_memory_bytes("):
        assert shown in source, f"examples/{name}.py does not show {shown!r}"
    assert "from avalanche.training import EWC, Replay" in source


def _called_names(source: str) -> set:
    """The names of every function or method a Python source calls."""
    import ast

    calls = [node.func for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)]
    return {f.id if isinstance(f, ast.Name) else f.attr for f in calls if isinstance(f, (ast.Name, ast.Attribute))}


def test_the_helper_holds_no_part_of_the_method():
    """``_common.py`` builds no strategy and trains nothing: it calls none of these."""
    called = _called_names((REPO_ROOT / "examples" / "_common.py").read_text(encoding="utf-8"))
    method = {"SDRStrategy", "from_benchmark", "build_sdr_model", "EWC", "Replay", "pretrain_backbone",
              "pretrain_vae", "run_sdr_stream", "train", "small_cnn_backbone", "make_multi_head_net"}
    assert not called & method, sorted(called & method)
    example = _called_names((REPO_ROOT / "examples" / "emnist_100.py").read_text(encoding="utf-8"))
    assert method - {"build_sdr_model", "pretrain_vae", "SDRStrategy"} <= example  # the check can fail


def test_the_parse_time_names_are_the_library_registries(examples):
    """``_common`` names the methods, budgets and detectors before torch is imported; they
    must be the library's registries (what each does is read from the registries)."""
    from avalanche_sdr.baselines import BASELINE_SETTINGS
    from avalanche_sdr.detection import DETECTOR_TYPES
    from avalanche_sdr.training import BUDGETS, METHODS
    from avalanche_sdr.vocabulary import DETECTORS

    common = examples["_common"]
    assert common.METHOD_NAMES == tuple(METHODS)
    assert DETECTORS == tuple(DETECTOR_TYPES)
    assert set(common.BUDGETS) == set(BUDGETS)
    assert set(common.BASELINE_BUDGET) == set(BUDGETS)
    assert set(common.BASELINE_BUDGET.values()) <= set(BASELINE_SETTINGS)


@pytest.mark.parametrize("name, splits, stream", [("emnist_100", None, "emnist100"), ("fashion_mnist_50", None, "fashion50"),
                                                   ("cifar10_10", None, "cifar10"), ("fashion_mnist", 2, "fashion10"),
                                                   ("fashion_mnist", 10, "fashion50")])
def test_capped_task_sizes_are_the_harness_caps(examples, name, splits, stream):
    from benchmarks.table2.methods import STREAMS

    caps = examples[name]["CAPPED_SIZES"]
    caps = caps if splits is None else caps[splits]
    assert caps == STREAMS[stream].capped_sizes
    argv = ["--task-sizes", "capped"] + ([] if splits is None else ["--n-splits", str(splits)])
    assert examples["_common"].task_sizes(examples[name]["parse_args"](argv), caps) == \
        dict(train_per_task=caps[0], valid_per_task=caps[1], test_per_task=caps[2])
    assert examples["_common"].task_sizes(examples[name]["parse_args"]([]), caps) == {}


def test_cifar100_has_no_capped_sizes(examples, capsys):
    with pytest.raises(SystemExit) as exit_info:
        examples["cifar100_40"]["parse_args"](["--task-sizes", "capped"])
    assert exit_info.value.code == 2  # the harness has no CIFAR-100 stream to match
    assert "unrecognized arguments: --task-sizes" in capsys.readouterr().err


def test_a_generator_for_a_rule_that_reads_none_is_a_usage_error(examples, capsys):
    parse_args = examples["fashion_mnist"]["parse_args"]
    assert parse_args(["--generator", "eft"]).generator == "eft"  # the paper's rule reads generators
    for argv in (["--method", "recommended", "--generator", "eft"], ["--detector", "two_sample", "--generator",
                                                                     "independent"]):
        with pytest.raises(SystemExit) as exit_info:
            parse_args(argv)
        assert exit_info.value.code == 2
        assert "reads no generators" in capsys.readouterr().err


def test_the_former_options_are_gone(examples, capsys):
    """One word per concept: the detector is ``--detector``; the generators follow it."""
    for argv in (["--decision", "two_sample"], ["--no-generators"]):
        with pytest.raises(SystemExit) as exit_info:
            examples["emnist_100"]["parse_args"](argv)
        assert exit_info.value.code == 2
        assert "unrecognized arguments" in capsys.readouterr().err


def test_detector_keyword_follows_detector_and_method(examples):
    common, parse_args = examples["_common"], examples["emnist_100"]["parse_args"]
    paper = common.detector(parse_args([]), elbo_samples=8)  # the paper method's rule, 8 ELBO samples
    assert paper.rule == "agreement" and paper.elbo_samples == 8
    assert common.detector(parse_args(["--method", "recommended"]), elbo_samples=8) is None  # the method's
    two_sample = common.detector(parse_args(["--method", "recommended", "--detector", "two_sample"]), elbo_samples=8)
    assert two_sample.rule == "two_sample"
    calibrated = common.detector(parse_args(["--detector", "calibrated"]), elbo_samples=8)
    assert calibrated.rule == "calibrated" and calibrated.elbo_samples == 8


def test_quickstart_forward_transfer_defaults_to_the_methods(examples):
    parse_args = examples["quickstart"]["parse_args"]
    assert parse_args([]).forward_transfer is None  # SDRStrategy(forward_transfer=None): the method's
    assert parse_args(["--method", "recommended"]).forward_transfer is None
    assert parse_args(["--forward-transfer"]).forward_transfer is True
    assert parse_args(["--method", "recommended", "--no-forward-transfer"]).forward_transfer is False


@pytest.fixture(scope="module")
def digits():
    from avalanche_sdr.benchmarks import MixedDigits

    return MixedDigits(seed=0)


@pytest.mark.parametrize("method, reuse", [("paper", None), ("paper", "accumulate"), ("recommended", None),
                                           ("recommended", "head")])
def test_the_legend_matches_the_run(examples, digits, method, reuse):
    """The legend is written from the strategy the run built: with the learning reuse it
    explains "entry updated" and never says that only a new head trains."""
    from avalanche_sdr import SDRStrategy, small_cnn_backbone

    common = examples["_common"]
    args = examples["quickstart"]["parse_args"](["--method", method] + (["--reuse", reuse] if reuse else []))
    strategy = SDRStrategy.from_benchmark(small_cnn_backbone(in_channels=1), digits, method=args.method,
                                          settings=args.preset, detector=common.detector(args, elbo_samples=8),
                                          **common.settings_keywords(args), latent_dim=8, vae_width=16)
    legend = common.legend(strategy, digits.n_warm_start)
    accumulate = (reuse or {"paper": "head", "recommended": "accumulate"}[method]) == "accumulate"
    assert ("only a new" in legend) is not accumulate
    assert ("entry updated" in legend) is accumulate
    assert ("G_e" in legend) is (method == "paper")  # generators: the paper method's VAEs
    assert ("power=" in legend) is (method == "recommended")
    values = common.method_values(strategy)
    assert values["strategy"]["reuse"]["name"] == ("accumulate" if accumulate else "head")
    assert values["generator"] == ("independent" if method == "paper" else "none")


def _write_root(write_emnist_root, fake_emnist, root, split):
    write_emnist_root(root, split, *fake_emnist(per_class_train=60, per_class_test=20, seed=0))


def test_missing_balanced_emnist_names_the_offline_bymerge_way(examples, tmp_path, write_emnist_root,
                                                               fake_emnist):
    from avalanche_sdr.benchmarks.sources import DatasetNotFoundError

    example = examples["emnist_100"]
    with pytest.raises(DatasetNotFoundError) as missing:
        example["load_benchmark"](example["parse_args"](["--data-root", str(tmp_path / "none")]))
    message = " ".join(str(missing.value).split())
    assert "Without internet, use EMNIST bymerge: --split bymerge with --data-root" in message
    assert "emnist-bymerge-{train,test}" in message and "not the paper's" in message

    _write_root(write_emnist_root, fake_emnist, tmp_path / "bymerge", "bymerge")
    with pytest.raises(DatasetNotFoundError) as missing:
        example["load_benchmark"](example["parse_args"](["--data-root", str(tmp_path / "bymerge")]))
    assert re.search(r"The bymerge files are in '.*bymerge': add --split bymerge", str(missing.value))
    benchmark = example["load_benchmark"](example["parse_args"](["--data-root", str(tmp_path / "bymerge"),
                                                                 "--split", "bymerge", "--task-sizes", "capped"]))
    assert len(benchmark.train_stream) == 100


def test_a_failed_emnist_download_names_the_offline_way(examples, tmp_path, monkeypatch):
    """``--download`` without internet: the network error becomes the missing-data message."""
    import torchvision.datasets

    from avalanche_sdr.benchmarks.sources import DatasetNotFoundError

    def offline(*args, **kwargs):
        raise OSError("<urlopen error [Errno -3] Temporary failure in name resolution>")

    monkeypatch.setattr(torchvision.datasets, "EMNIST", offline)
    example = examples["emnist_100"]
    with pytest.raises(DatasetNotFoundError) as missing:
        example["load_benchmark"](example["parse_args"](["--data-root", str(tmp_path), "--download"]))
    message = " ".join(str(missing.value).split())
    assert "The download failed (<urlopen error" in message and "--split bymerge" in message
