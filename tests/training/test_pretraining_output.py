"""What pretraining prints where stderr is not a terminal (output piped or redirected):
labelled plain lines on stderr, no tqdm frames, nothing on stdout."""
import re

import torch

from avalanche_sdr.models import small_cnn_backbone
from avalanche_sdr.training import pretrain_backbone


def test_piped_pretraining_prints_labelled_plain_lines(prototype_stream, capsys):
    torch.manual_seed(0)
    warm = [prototype_stream.train_stream[i] for i in range(3)]
    pretrain_backbone(small_cnn_backbone(in_channels=1, widths=(8, 16)), warm, epochs=10, lr=1e-2, batch_size=16)
    out, err = capsys.readouterr()  # pytest's captured stderr is not a terminal: no bar
    assert out == "" and "\r" not in err
    lines = err.splitlines()
    # about five progress lines (every 2nd epoch, the last one in the summary), then the summary
    assert [re.match(r"\[pretrain E0\] epoch (\d+)/10: loss \d", line).group(1) for line in lines[:-1]] == [
        "2", "4", "6", "8"]
    assert re.fullmatch(r"\[pretrain E0\] 10 epochs on 3 warm-start tasks \(\d+ images\): loss [\d.e-]+ \| "
                        r"\d+\.\ds", lines[-1])


def test_quiet_pretraining_prints_nothing(prototype_stream, capsys):
    warm = [prototype_stream.train_stream[i] for i in range(3)]
    pretrain_backbone(small_cnn_backbone(in_channels=1, widths=(8, 16)), warm, epochs=1, verbose=False)
    assert capsys.readouterr() == ("", "")
