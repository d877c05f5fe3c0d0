"""benchmarks/studies/task_free/router_ablation.py: the validation-split ablation of the "lda" router."""
import pytest

from benchmarks.studies.task_free import router_ablation

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ablation") / "ablation.md"
    report = router_ablation.main(router_ablation.parse_args(["--stream", "digits", "--seeds", "0", "--out", str(out)]))
    return out, report


@pytest.mark.slow
def test_the_table_lists_every_variant_for_the_validation_split(digits_run):
    out, report = digits_run
    assert out.read_text() == report
    assert "VALIDATION split" in report and "digits seed 0 (180 validation images)" in report
    for variant in ("gaussian", "E0 LDA", "concatenated LDA, 5 per class", "lda, 20 per class",
                    "lda, E0 at half weight, 10 per class", "lda, concatenated term at weight 0.25, 20 per class",
                    "lda_weighted, 20 per class"):
        row = next(line for line in report.splitlines() if line.startswith(f"| {variant} |"))
        assert 0.0 <= float(row.split("|")[2]) <= 100.0
    assert "sends" in report and "validation images to another group" in report
    assert "lda_weighted chose weight" in report and "lda_weighted's evidence capped" in report


@pytest.mark.slow
def test_the_shipped_router_is_the_last_refit(digits_run, tmp_path):
    """The "lda, 20 per class" column is model.predict(x, "lda") on the validation split."""
    import torch

    from avalanche_sdr.dataset_tensors import experience_tensors

    from avalanche_sdr.routers import lda_router

    model, benchmark = router_ablation.trained_model("digits", 0, None, None, tmp_path)
    trained = model.routing_state(lda_router.REPEATS_KEY)["counts"].clone()  # gathered during training
    result, errors = router_ablation.ablation(model, benchmark)
    assert torch.equal(model.routing_state(lda_router.REPEATS_KEY)["counts"], trained)
    x, y = zip(*[experience_tensors(e)[:2] for e in benchmark.valid_stream])
    x, y = torch.cat(x), torch.cat(y)
    assert result["lda, 20 per class"] == pytest.approx(100 * float((model.predict(x, "lda").class_ids == y).double().mean()))
    # the refit gathers the same evidence as training did: the same weight, the same predictions
    assert result["lda_weighted, 20 per class"] == pytest.approx(
        100 * float((model.predict(x, "lda_weighted").class_ids == y).double().mean()))
    assert errors["evidence"]["images"] > 0 and errors["evidence"]["chosen"] in (0.0, 0.25, 0.5, 0.75, 1.0)
    assert errors["n"] == len(y) and 0 <= errors["misrouted"] <= len(y)
    evidence = errors["evidence"]
    assert evidence["seconds"] > 0 and all(n >= cap for cap, (_, n, _, _) in evidence["capped"].items())


def test_a_capped_evidence_chooses_at_the_first_repeat_that_reaches_the_cap():
    progress = [(100, 0.5, 1.0), (200, 0.25, 2.0), (300, 0.25, 3.0), (450, 0.0, 4.5)]
    assert router_ablation.capped_choices(progress, (150, 300, 450, 500)) == {
        150: (0.25, 200, 2.0), 300: (0.25, 300, 3.0), 450: (0.0, 450, 4.5)}  # 500: never reached
    assert router_ablation.capped_choices([], (100,)) == {}


def test_unknown_streams_are_refused_before_any_work(capsys):
    with pytest.raises(SystemExit) as exit_info:
        router_ablation.parse_args(["--stream", "mnist", "--out", "x.md"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_refits_without_the_shipped_number_of_images_are_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        router_ablation.parse_args(["--stream", "digits", "--per-class", "5", "10", "--out", "x.md"])
    assert exit_info.value.code == 2
    assert "--per-class must include 20" in capsys.readouterr().err
    args = router_ablation.parse_args(["--stream", "digits", "--per-class", "20", "5", "--out", "x.md"])
    assert args.per_class == [5, 20]  # the shipped number last
