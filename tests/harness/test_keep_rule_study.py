"""The keep rule's error-rate computation (benchmarks/studies/learning_reuse/keep_rule.py)."""
from __future__ import annotations

import numpy as np
import pytest

from avalanche_sdr.training import keep_rule as keep_rule_lib
from benchmarks.studies.learning_reuse import keep_rule


def simulated_pass_rate(n, p_loss, p_gain, margin, draws=200_000, seed=0):
    rng = np.random.default_rng(seed)
    outcomes = rng.multinomial(n, [p_loss, p_gain, 1.0 - p_loss - p_gain], size=draws)
    return float(np.mean(outcomes[:, 0] - outcomes[:, 1] <= margin))


@pytest.mark.parametrize("n,p_loss,p_gain,margin", [(4, 0.05, 0.0, 0), (20, 0.04, 0.02, 0), (40, 0.1, 0.05, 1),
                                                    (100, 0.02, 0.01, 0)])
def test_pass_probability_matches_a_simulation(n, p_loss, p_gain, margin):
    exact = keep_rule.pass_probability(n, p_loss, p_gain, margin)
    # 200,000 draws: the standard error is at most 0.0011
    assert exact == pytest.approx(simulated_pass_rate(n, p_loss, p_gain, margin), abs=0.006)


def test_pass_probability_edges():
    assert keep_rule.pass_probability(50, 0.0, 0.0) == pytest.approx(1.0)
    assert keep_rule.pass_probability(0, 0.3, 0.0) == pytest.approx(1.0)
    assert keep_rule.pass_probability(3, 1.0, 0.0) == 0.0
    assert keep_rule.pass_probability(10, 0.05, 0.0) == pytest.approx(0.95 ** 10)  # only L = 0 passes
    # more held-out images catch a true loss more often
    rates = [keep_rule.pass_probability(n, 0.02, 0.0) for n in (10, 40, 100)]
    assert rates[0] > rates[1] > rates[2]


@pytest.mark.parametrize("bad", [dict(n=-1, p_loss=0.1, p_gain=0.0), dict(n=10, p_loss=0.7, p_gain=0.5),
                                 dict(n=10, p_loss=0.1, p_gain=0.0, margin=-1), dict(n=2.5, p_loss=0.1, p_gain=0.0)])
def test_pass_probability_refuses_bad_input(bad):
    with pytest.raises(ValueError):
        keep_rule.pass_probability(**bad)


def test_heldout_sizes_and_sign_test_floor():
    assert [keep_rule_lib.heldout_per_class(n) for n in (4, 10, 25, 100, 300)] == [0, 2, 5, 20, 20]
    assert keep_rule.sign_test_min_images(0.05) == 5  # 0.5**5 = 0.031 <= 0.05 < 0.5**4
    assert keep_rule.sign_test_min_images(0.5) == 1
    with pytest.raises(ValueError, match="n_k"):
        keep_rule_lib.heldout_per_class(-3)
    with pytest.raises(ValueError, match="level"):
        keep_rule.sign_test_min_images(1.0)


def test_command_writes_the_table(tmp_path, capsys):
    path = keep_rule.main(["--out", str(tmp_path / "kr")])
    text = path.read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == len(keep_rule.TASK_SIZES) * len(keep_rule.CLASS_COUNTS)
    first = rows[0].split(" | ")
    assert first[2] == str(2 * keep_rule_lib.heldout_per_class(10))
    assert float(first[3]) == pytest.approx(keep_rule.pass_probability(4, 0.01, 0.0), abs=5e-4)
    assert "wrote" in capsys.readouterr().out


def test_command_refuses_an_unwritable_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SystemExit, match="writable"):
        keep_rule.main(["--out", str(blocker / "sub")])
