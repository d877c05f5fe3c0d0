"""Wall, user and system CPU ms per image and minor page faults of an entry's eval-mode forward at batches 8, 32, 64
(1,024 random 1x28x28 images, 3 rounds, one torch thread). Run with and without
GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=4294967295
from the repository root: PYTHONPATH=. python docs/results/where_the_time_goes/page_faults.py"""
import os, time, torch, resource
torch.set_num_threads(1)
from avalanche_sdr.models import build_sdr_model, small_cnn_backbone
torch.manual_seed(0)
model = build_sdr_model(small_cnn_backbone(in_channels=1, widths=(32, 64, 128)), in_channels=1, image_size=28, generator=None)
e = model.create_entry(0)
with torch.no_grad():
    for p in model.encoder.entry_parameters(e):
        p.add_(0.05 * torch.randn_like(p))
x = torch.rand(1024, 1, 28, 28)
for bs in (8, 32, 64):
    r0 = resource.getrusage(resource.RUSAGE_SELF); w = time.perf_counter()
    for _ in range(3):
        model.batched_features(x, e, bs)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    n = 3 * 1024
    print(f"batch {bs}: wall {(time.perf_counter()-w)/n*1e3:.3f} ms/img, user {(r1.ru_utime-r0.ru_utime)/n*1e3:.3f}, sys {(r1.ru_stime-r0.ru_stime)/n*1e3:.3f}, minor faults {r1.ru_minflt-r0.ru_minflt}")
