"""Wall ms of each op of one entry forward of the CPU preset's small CNN at batch 64 (shares only; PYTHONPATH=. python THIS)."""
import time, torch, torch.nn.functional as F
torch.set_num_threads(1)
from benchmarks.studies.where_the_time_goes.router_fit import synthetic_repository
model, data = synthetic_repository(2, 600, 0)
model.eval()
import os
print(os.getloadavg())
bs = 64
x = data[1][0][:bs]
tim = {}
def rec(name, f, *a):
    s = time.perf_counter_ns(); r = f(*a); tim[name] = tim.get(name, 0) + time.perf_counter_ns() - s; return r
body = model.encoder.backbone.body.features
with torch.no_grad():
  model.encoder.set_active(1)
  for rep in range(30):
    h = rec("norm", model.encoder.backbone.normalize, x)
    for i, layer in enumerate(body):
        name = type(layer).__name__
        if name == "EFTConv2d":
            f = rec(f"conv{i}", layer.conv, h)
            ad = layer.adapters["1"]
            s = rec(f"spat{i}", ad.spatial, f)
            p = rec(f"pw{i}", ad.pointwise, f)
            h = rec(f"add{i}", lambda: s + ad.gamma * p)
        else:
            h = rec(f"{name}{i}", layer, h)
    rec("pool", lambda: h.mean(dim=(2, 3)))
tot = sum(tim.values())
for k, v in tim.items(): print(f"{k:12s} {v/30/1e6:7.3f} ms  {100*v/tot:5.1f}%")
print("total ms per img", tot/30/1e6/bs)
