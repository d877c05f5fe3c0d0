"""Time E0's and an entry's eval-mode forward per image at several batch sizes, one torch
thread, interleaved rounds (min over rounds), 2,048 Fashion-sized images (1x28x28), the
CPU preset's small CNN (32, 64, 128). Also checks that the features are equal at every batch size.
Run: cd /work/main && PYTHONPATH=. nice -n 10 python docs/results/where_the_time_goes/batch_time.py"""
import os, sys, time
SIDE = int(sys.argv[1]) if len(sys.argv) > 1 else 28
import torch
torch.set_num_threads(1)
from avalanche_sdr.models import build_sdr_model, small_cnn_backbone
torch.manual_seed(0)
model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(32, 64, 128)), in_channels=1, image_size=SIDE, generator=None)
e = model.create_entry(0)
with torch.no_grad():  # give the entry non-trivial adapters and BatchNorm statistics
    for p in model.encoder.entry_parameters(e):
        p.add_(0.05 * torch.randn_like(p))
model.eval()
x = torch.rand(2048, 1, SIDE, SIDE)
sizes = (16, 32, 64, 128, 256, 512)
print("load before:", os.popen("uptime").read().strip())
best = {(bs, en): float("inf") for bs in sizes for en in (None, e)}
ref, diff = {}, {bs: 0.0 for bs in sizes}
for r in range(5):
    for bs in sizes:
        for entry in (None, e):
            t = time.perf_counter()
            f = model.batched_features(x, entry, batch_size=bs)
            best[bs, entry] = min(best[bs, entry], (time.perf_counter() - t) / x.shape[0] * 1e3)
            ref.setdefault(entry, f)
            diff[bs] = max(diff[bs], (f - ref[entry]).abs().max().item())
print("| batch | E0 ms/img | entry ms/img | max |feature difference| vs batch 16 |")
print("|---|---|---|---|")
for bs in sizes:
    print(f"| {bs} | {best[bs, None]:.3f} | {best[bs, e]:.3f} | {diff[bs]:.1e} |")
print("load after:", os.popen("uptime").read().strip())
