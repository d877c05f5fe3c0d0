"""run_sdr_stream(seed_each_task=...): the global generators seeded before every task
(avalanche_sdr.seeding.task_seed), so that a task's training draws depend on the seed and
its position only (common random numbers across configurations; runs resumed alike)."""
import pytest
import torch

from avalanche_sdr.seeding import seed_everything

pytestmark = pytest.mark.usefixtures("one_thread")


def test_seed_each_task_makes_a_run_independent_of_the_generators_before_it(prototype_stream):
    """What was drawn before the run (or by an earlier task) does not reach a task's training."""
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_sdr import CPU_SETTINGS, SDRStrategy
    from avalanche_sdr.models import small_cnn_backbone
    from avalanche_sdr.training.stream_runner import run_sdr_stream

    fast = CPU_SETTINGS.replace(new_task_epochs=1, lr_milestones=(), reuse_epochs=1)

    def run(before: int, each):
        torch.manual_seed(0)
        backbone = small_cnn_backbone(in_channels=1, widths=(8, 16))
        strategy = SDRStrategy.from_benchmark(backbone, prototype_stream, settings=fast, method="paper",
                                              evaluator=EvaluationPlugin(accuracy_metrics(experience=True), loggers=[]))
        seed_everything(before)
        results = run_sdr_stream(strategy, prototype_stream, seed=0, seed_each_task=each)
        return [t["train_accuracy_per_epoch"] + [t["test_accuracy"]] for t in results["tasks"]], results

    first, results = run(1, 7)
    assert results["seed_each_task"] == 7
    assert run(2, 7)[0] == first  # other draws before the run: the same run
    assert run(1, 8)[0] != first  # another task seed: other draws
    assert run(1, None)[0] != run(2, None)[0]  # without it the generators before the run matter
    with pytest.raises(ValueError, match="seed_each_task must be None or a seed"):
        run_sdr_stream(None, prototype_stream, seed_each_task=1.5)
