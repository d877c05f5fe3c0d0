"""``--reuse {head,accumulate}`` of every example: parsed (``None``, the ``--method``'s,
when not given), recorded in the run's config and so in what a ``--checkpoint-dir`` must
match, so a directory written with another ``--reuse`` is refused.

In this process, without training: the scripts' parsers, ``_common.command_config`` and
the checkpoint comparison of :func:`~avalanche_sdr.training.checkpoint.load_pretrained`.
"""
import pytest

EXAMPLES = ("quickstart", "fashion_mnist", "fashion_mnist_50", "emnist_100", "cifar10_10", "cifar100_40")


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_takes_reuse(examples, name, capsys):
    parse_args = examples[name]["parse_args"]
    assert parse_args([]).reuse is None  # the method's
    assert parse_args(["--reuse", "accumulate"]).reuse == "accumulate"
    assert parse_args(["--reuse", "no_loss"]).reuse == "no_loss"
    assert parse_args(["--method", "recommended", "--reuse", "head"]).reuse == "head"
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--reuse", "both"])
    assert exit_info.value.code == 2
    capsys.readouterr()
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--reuse {head,accumulate,no_loss}" in text and "keeps training the reused entry" in text


def test_reuse_is_in_the_config_and_a_checkpoint_of_another_is_refused(examples, tmp_path):
    import torch

    from avalanche_sdr.training.checkpoint import CheckpointMismatchError, load_pretrained, save_pretrained

    common = examples["_common"]
    parse_args = examples["emnist_100"]["parse_args"]
    configs = {reuse: common.command_config(parse_args(["--reuse", reuse]), {"stream": "x"}, threads=1)
               for reuse in ("head", "accumulate")}
    assert configs["head"]["options"]["reuse"] == "head"
    assert configs["accumulate"]["options"]["reuse"] == "accumulate"
    assert common.settings_keywords(parse_args(["--reuse", "accumulate"])) == {"reuse": "accumulate"}
    assert common.settings_keywords(parse_args([])) == {}  # the method's and the preset's
    module = torch.nn.Linear(2, 2)
    save_pretrained(tmp_path / "pretrained.pt", {"backbone": module}, {"config": configs["head"], "seed": 0})
    with pytest.raises(CheckpointMismatchError, match=r"run_info\.config\.options\.reuse: checkpoint 'head', "
                                                       r"here 'accumulate'"):
        load_pretrained(tmp_path / "pretrained.pt", {"backbone": module}, {"config": configs["accumulate"], "seed": 0})
