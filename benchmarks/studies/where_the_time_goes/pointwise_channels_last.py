"""An entry forward with the adapters' grouped 1x1 convolution on a channels-last copy: bit-identity and CPU ms against today's (PYTHONPATH=. python THIS)."""
import time, torch, os
torch.set_num_threads(1)
from cpu_timing import best_cpu_ms
from benchmarks.studies.where_the_time_goes.router_fit import synthetic_repository
from avalanche_sdr.models import eft
model, data = synthetic_repository(4, 600, 0)
model.eval()
orig = eft.EFTAdapter.forward
def fast(self, f):
    out = self.spatial(f)
    if self.pointwise is not None:
        p = self.pointwise(f.contiguous(memory_format=torch.channels_last))
        out = out + self.gamma * p
    return out
def fast2(self, f):
    out = self.spatial(f)
    if self.pointwise is not None:
        p = self.pointwise(f.contiguous(memory_format=torch.channels_last)).contiguous()
        if self.gamma == 1.0: out += p
        else: out = out + self.gamma * p
    return out
print(os.getloadavg())
def t(f):
    return best_cpu_ms(f, 4, 3)
with torch.no_grad():
  for bs in (40, 64):
    x = data[1][0][:bs]
    for e in (1, 3):
      res = {0: [], 1: [], 2: []}
      for rnd in range(8):
        eft.EFTAdapter.forward = orig
        ms, ref = t(lambda: model.features(x, e)); res[0].append(ms)
        eft.EFTAdapter.forward = fast
        ms2, r = t(lambda: model.features(x, e)); res[1].append(ms2)
        eft.EFTAdapter.forward = fast2
        ms3, r3 = t(lambda: model.features(x, e)); res[2].append(ms3)
      ms, ms2, ms3 = (min(res[k]) for k in range(3))
      print(bs, e, "orig %.2f  fast %.2f fast2 %.2f ms" % (ms, ms2, ms3), torch.equal(ref, r), torch.equal(ref, r3))
