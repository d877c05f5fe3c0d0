"""``--reuse {head,accumulate}`` of every example that builds an SDRStrategy: parsed,
recorded in the results' config (its ``settings``) and in what a ``--checkpoint-dir``
must match, so a directory written with another ``--reuse`` is refused.

In this process, without training: the scripts' parsers, ``_common.sdr_config`` and the
checkpoint comparison of :func:`~avalanche_sdr.training.checkpoint.load_pretrained`.
"""
import runpy
import sys

import pytest

from benchmarks.cli_startup import REPO_ROOT

EXAMPLES = ("quickstart", "fashion_mnist", "fashion_mnist_50", "emnist_100", "cifar10_10", "cifar100_40")


@pytest.fixture
def examples(monkeypatch):
    """``{name: the script's globals}``, run as a module (not ``__main__``), with the
    examples' folder first on the import path as ``python examples/<name>.py`` has it."""
    monkeypatch.syspath_prepend(str(REPO_ROOT / "examples"))
    monkeypatch.delitem(sys.modules, "_common", raising=False)
    return {name: runpy.run_path(str(REPO_ROOT / "examples" / f"{name}.py"), run_name=f"example_{name}")
            for name in EXAMPLES}


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_takes_reuse(examples, name, capsys):
    parse_args = examples[name]["parse_args"]
    assert parse_args([]).reuse == "head"
    assert parse_args(["--reuse", "accumulate"]).reuse == "accumulate"
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--reuse", "both"])
    assert exit_info.value.code == 2
    capsys.readouterr()
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--reuse {head,accumulate}" in text and "keeps training the reused entry" in text


def test_reuse_is_in_the_config_and_a_checkpoint_of_another_is_refused(examples, tmp_path):
    import torch

    from avalanche_sdr.training.checkpoint import CheckpointMismatchError, load_pretrained, save_pretrained

    common = sys.modules["_common"]
    parse_args = examples["emnist_100"]["parse_args"]
    configs = {reuse: common.sdr_config(parse_args(["--reuse", reuse]), {"stream": "x"})
               for reuse in ("head", "accumulate")}
    assert configs["head"]["settings"]["reuse"] == "head"
    assert configs["accumulate"]["settings"]["reuse"] == "accumulate"
    assert common.sdr_settings(parse_args(["--reuse", "accumulate"])).reuse == "accumulate"
    module = torch.nn.Linear(2, 2)
    save_pretrained(tmp_path / "pretrained.pt", {"backbone": module}, {"config": configs["head"], "seed": 0})
    with pytest.raises(CheckpointMismatchError, match=r"run_info\.config\.settings\.reuse: checkpoint 'head', "
                                                       r"here 'accumulate'"):
        load_pretrained(tmp_path / "pretrained.pt", {"backbone": module}, {"config": configs["accumulate"], "seed": 0})
