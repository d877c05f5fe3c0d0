"""Are E0's and a random entry's eval-mode features at batch 16, 32 and 128 bit-identical to those at 64?
The four models of batch_models.py (CASES, model_with_entry), 300 random images, one torch thread.
Run from the repository root: PYTHONPATH=. python docs/results/where_the_time_goes/batch_equal_64.py"""
import os, sys
import torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from batch_models import CASES, model_with_entry
torch.set_num_threads(1)
for name, (make, shape) in CASES.items():
    model, e = model_with_entry(make, shape)
    x = torch.rand((300,) + shape)
    out = []
    for entry in (None, e):
        ref = model.batched_features(x, entry, 64)
        out.append(" ".join(f"b{b}:{torch.equal(model.batched_features(x, entry, b), ref)}" for b in (16, 32, 128)))
    print(name, "E0", out[0], "| entry", out[1])
