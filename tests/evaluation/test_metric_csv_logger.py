"""MetricCSVLogger: every scalar metric value becomes a CSV row."""
import csv

import torch
from avalanche.evaluation.metric_results import MetricValue

from avalanche_sdr.evaluation import MetricCSVLogger


def test_scalars_are_written_and_non_scalars_skipped(tmp_path):
    path = tmp_path / "metrics.csv"
    logger = MetricCSVLogger(path)
    logger.log_metrics(
        [
            MetricValue(None, "Detection_Correct/train_phase/train_stream", 0.75, 4),
            MetricValue(None, "Repository_Memory_MB/train_phase/train_stream", torch.tensor(1.5), 4),
            MetricValue(None, "Top1_Acc_Stream", {"Task000": 0.9, "Task001": 1.0}, 5),
            MetricValue(None, "Some_Image", torch.zeros(3, 4), 5),
            MetricValue(None, "Some_Flag", True, 5),
        ]
    )
    # Rows are flushed as they are written: readable before close.
    rows = list(csv.reader(open(path)))
    logger.close()
    logger.close()
    assert rows == [
        ["metric", "x", "value"],
        ["Detection_Correct/train_phase/train_stream", "4", "0.75"],
        ["Repository_Memory_MB/train_phase/train_stream", "4", "1.5"],
        ["Top1_Acc_Stream/Task000", "5", "0.9"],
        ["Top1_Acc_Stream/Task001", "5", "1.0"],
    ]
    assert logger.closed
