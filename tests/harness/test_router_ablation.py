"""benchmarks/router_ablation.py: the validation-split ablation of the "lda" router."""
import pytest

from benchmarks import router_ablation

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ablation") / "ablation.md"
    report = router_ablation.main(router_ablation.parse_args(["--stream", "digits", "--seeds", "0", "--out", str(out)]))
    return out, report


def test_the_table_lists_every_variant_for_the_validation_split(digits_run):
    out, report = digits_run
    assert out.read_text() == report
    assert "VALIDATION split" in report and "digits seed 0 (180 validation images)" in report
    for variant in ("gaussian", "E0 LDA", "concatenated LDA, 5 per class", "lda, 20 per class",
                    "lda, E0 at half weight, 10 per class"):
        row = next(line for line in report.splitlines() if line.startswith(f"| {variant} |"))
        assert 0.0 <= float(row.split("|")[2]) <= 100.0
    assert "sends" in report and "validation images to another group" in report


def test_the_shipped_router_is_the_last_refit(digits_run, tmp_path):
    """The "lda, 20 per class" column is model.predict(x, "lda") on the validation split."""
    import torch

    from avalanche_sdr.dataset_tensors import experience_tensors

    model, benchmark = router_ablation.trained_model("digits", 0, None, None, tmp_path)
    result, errors = router_ablation.ablation(model, benchmark)
    x, y = zip(*[experience_tensors(e)[:2] for e in benchmark.valid_stream])
    x, y = torch.cat(x), torch.cat(y)
    assert result["lda, 20 per class"] == pytest.approx(100 * float((model.predict(x, "lda").class_ids == y).double().mean()))
    assert errors["n"] == len(y) and 0 <= errors["misrouted"] <= len(y)


def test_unknown_streams_are_refused_before_any_work(capsys):
    with pytest.raises(SystemExit) as exit_info:
        router_ablation.parse_args(["--stream", "mnist", "--out", "x.md"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
