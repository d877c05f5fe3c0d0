"""The harness's flags for the learning reuse's update options (``--update-option`` and ``--update-balance``,
``--update-rollback``, ``--update-early-stop``): parsing, refusals, the renamed rows and
their options, the builders' settings. Fast: no training.
"""
import re

import pytest

from benchmarks.table2 import command as table2
from benchmarks.table2.specs import run_id
from benchmarks.table2.methods import METHODS
from benchmarks.table2.variants import UPDATE_FLAGS, Row, harness_variant_rows, update_rows

ACC = (("reuse", "accumulate"),)


def test_flag_words_name_the_librarys_balance_rules():
    from avalanche_sdr.training.learning_reuse import BALANCE_RULES

    assert {v for v in UPDATE_FLAGS["update_balance"].values() if v is not False} == set(BALANCE_RULES)


def test_update_flags_rename_and_configure_the_accumulate_rows_only(tmp_path):
    args = table2.parse_args(["--methods", "sdr_two_sample_nogen", "replay", "--reuse", "head", "accumulate",
                              "--update-balance", "always", "--update-rollback", "off", "--out", str(tmp_path)])
    assert args.update_options == {"update_balance": "always", "update_rollback": "off"}
    rows = harness_variant_rows(args)
    assert rows == [Row("sdr_two_sample_nogen"),
                    Row("sdr_two_sample_nogen", "accumulate_balance_always_rollback_off",
                        ACC + (("update_balance", "always"), ("update_rollback", False))),
                    Row("replay")]
    assert run_id("fashion10", "cpu", rows[1].method, 0, rows[1].variant) == \
        "fashion10_cpu_sdr_two_sample_nogen_accumulate_balance_always_rollback_off_seed0"
    default = table2.parse_args(["--methods", "sdr_two_sample_nogen", "--reuse", "accumulate",
                                 "--update-balance", "default", "--out", str(tmp_path)])
    assert default.update_options == {} and harness_variant_rows(default) == [
        Row("sdr_two_sample_nogen", "accumulate", ACC)]
    early = table2.parse_args(["--methods", "sdr_two_sample_nogen", "--reuse", "accumulate", "--update-early-stop",
                               "on", "--out", str(tmp_path)])
    assert harness_variant_rows(early) == [Row("sdr_two_sample_nogen", "accumulate_earlystop_on",
                                               ACC + (("update_early_stop", True),))]


@pytest.mark.parametrize("argv, message", [
    (["--methods", "sdr_two_sample_nogen", "--update-balance", "off"], "no learning-reuse row"),
    (["--methods", "replay", "--update-rollback", "on"], "no learning-reuse row"),
    (["--methods", "sdr_two_sample_nogen", "--reuse", "accumulate", "--update-balance", "sometimes"],
     "invalid choice"),
])
def test_update_flags_that_cannot_act_are_refused(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        table2.parse_args(argv + ["--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_update_rows_refuses_unknown_words():
    with pytest.raises(ValueError, match="choose one of"):
        update_rows([Row("sdr", "accumulate", ACC)], {"update_balance": "yes"})
    with pytest.raises(ValueError, match="unknown update option"):
        update_rows([Row("sdr", "accumulate", ACC)], {"update_lr": "on"})


def test_sdr_builders_get_the_update_options():
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr.models import small_cnn_backbone
    from benchmarks.table2.methods import PRESETS, STREAMS

    stream, preset = STREAMS["digits"], PRESETS["smoke"]
    benchmark = stream.factory(0)
    backbone = small_cnn_backbone(in_channels=1, widths=(8, 8))

    def build(**options):
        return METHODS["sdr_two_sample_nogen"].build(
            backbone, benchmark, stream, preset, device="cpu",
            evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]), **options)

    from avalanche_sdr import LearningReuse

    sdr = build(reuse="accumulate", update_balance="always", update_rollback=False).sdr
    assert sdr.settings == preset.sdr and sdr.reuse == LearningReuse(balance="always", rollback=False)
    assert sdr.reuse.config()["balance"] == "always"  # what the run's checkpoint fingerprint records
    assert build(reuse="accumulate").sdr.reuse == LearningReuse()
    with pytest.raises(ValueError, match="act only on the learning reuse"):
        build(update_balance=False)


def test_update_epochs_flag_names_the_row_and_reaches_the_settings(tmp_path):
    args = table2.parse_args(["--methods", "sdr_two_sample_nogen", "--reuse", "head", "accumulate",
                              "--update-epochs", "3", "--out", str(tmp_path)])
    rows = harness_variant_rows(args)
    assert rows == [Row("sdr_two_sample_nogen"),
                    Row("sdr_two_sample_nogen", "accumulate_epochs_3", ACC + (("update_epochs", 3),))]
    with pytest.raises(SystemExit):
        table2.parse_args(["--methods", "sdr_two_sample_nogen", "--reuse", "accumulate", "--update-epochs", "4",
                           "--out", str(tmp_path)])
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr.models import small_cnn_backbone
    from benchmarks.table2.methods import PRESETS, STREAMS

    stream, preset = STREAMS["digits"], PRESETS["smoke"]
    strategy = METHODS["sdr_two_sample_nogen"].build(
        small_cnn_backbone(in_channels=1, widths=(8, 8)), stream.factory(0), stream, preset, device="cpu",
        evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]), **dict(rows[1].options))
    assert strategy.sdr.reuse.epochs == 3 and strategy.sdr.reuse.config()["epochs"] == 3


def test_update_option_gives_any_learning_reuse_keyword_without_a_flag_of_its_own(tmp_path):
    """``--update-option``: an option of ``LearningReuse`` that has no flag (here ``lr`` and
    ``guard_exemplars``) reaches the row's name, its options and the built reuse, through the
    library's own check; a new option of the reuse thus needs no change in the harness."""
    args = table2.parse_args(["--methods", "sdr_two_sample_nogen", "replay", "--reuse", "head", "accumulate",
                              "--update-epochs", "3", "--update-option", "lr=0.0005", "guard_exemplars=10",
                              "--out", str(tmp_path)])
    assert args.update_keywords == {"lr": 0.0005, "guard_exemplars": 10}
    rows = harness_variant_rows(args)
    assert rows == [Row("sdr_two_sample_nogen"),
                    Row("sdr_two_sample_nogen", "accumulate_epochs_3_lr_0.0005_guard_exemplars_10",
                        ACC + (("update_epochs", 3), ("update_lr", 0.0005), ("update_guard_exemplars", 10))),
                    Row("replay")]
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr import LearningReuse
    from avalanche_sdr.models import small_cnn_backbone
    from benchmarks.table2.methods import PRESETS, STREAMS

    stream, preset = STREAMS["digits"], PRESETS["smoke"]
    strategy = METHODS["sdr_two_sample_nogen"].build(
        small_cnn_backbone(in_channels=1, widths=(8, 8)), stream.factory(0), stream, preset, device="cpu",
        evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]), **dict(rows[1].options))
    assert strategy.sdr.reuse == LearningReuse(epochs=3, lr=0.0005, guard_exemplars=10)
    text = table2.parse_args(["--methods", "sdr_two_sample_nogen", "--reuse", "accumulate", "--update-option",
                              "guard=false", "--out", str(tmp_path)])
    assert harness_variant_rows(text) == [Row("sdr_two_sample_nogen", "accumulate_guard_false",
                                              ACC + (("update_guard", False),))]


@pytest.mark.parametrize("argv, message", [
    (["--update-option", "lr"], "expected KEYWORD=VALUE"),
    (["--update-option", "lrate=0.01"], r"does not take \['lrate'\]"),
    (["--update-option", "lr=-1"], "lr"),
    (["--update-option", "lr=0.01", "lr=0.02"], "lr given twice"),
    (["--update-option", "top_layers=2"], "has its own flag, --update-top-layers"),
    (["--update-option", "rollback=true"], "has its own flag, --update-rollback"),
    (["--update-rollback", "on", "--update-option", "guard=false"], "rollback=True needs guard=True"),
    (["--update-option", 'lr="a b"'], "cannot name a row"),
])
def test_update_options_the_library_refuses_stop_the_call_before_any_work(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        table2.parse_args(["--methods", "sdr_two_sample_nogen", "--reuse", "accumulate"] + argv
                          + ["--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_update_option_without_a_learning_reuse_row_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        table2.parse_args(["--methods", "sdr_two_sample_nogen", "--update-option", "lr=0.01", "--out", str(tmp_path)])
    assert "no learning-reuse row" in capsys.readouterr().err
