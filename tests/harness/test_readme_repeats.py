"""benchmarks.studies.detection.readme_repeats: the README's own Use block, with only its seed changed."""
import pytest

from benchmarks.studies.detection import readme_repeats


def test_the_use_block_is_the_readmes_first_python_block_with_its_seed_replaced():
    block = readme_repeats.use_block()
    assert "method=\"recommended\"" in block and "pretrain_backbone(" in block
    seeded = readme_repeats.seeded_block(7)
    assert "seed_everything(7)" in seeded and "MixedDigits(seed=7" in seeded
    assert seeded.replace("seed_everything(7)", "seed_everything(0)").replace("MixedDigits(seed=7",
                                                                              "MixedDigits(seed=0") == block


def test_a_readme_whose_block_no_longer_carries_the_seed_is_refused(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n```python\nseed_everything(1)\nbenchmark = MixedDigits(seed=0)\n```\n")
    with pytest.raises(SystemExit, match="should contain"):
        readme_repeats.seeded_block(3, readme)


def test_the_report_counts_correct_of_scored_per_seed():
    task = dict(decision="reuse", entry=1, repeat=True, p_value=[0.3, 1e-9], level=1e-3)
    run = dict(seed=4, correct=7, miss=0, incorrect=0, scored=7, tasks=[task], torch_threads=1, load_average=2.0,
               wall_seconds=12.0)
    text = readme_repeats.report([run])
    assert "| 4 | 7 of 7 | 0 | 0 | R1 | 0.3 | 0.001 | 1 | 2.0 | 12 |" in text
    assert "| all | 7 of 7 | 0 | 0 |" in text
