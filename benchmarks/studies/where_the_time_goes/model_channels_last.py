"""The whole model in channels-last memory format: bit-identity and CPU ms of its features against today's (PYTHONPATH=. python THIS)."""
import time, torch, copy, os
torch.set_num_threads(1)
from cpu_timing import best_cpu_ms
from benchmarks.studies.where_the_time_goes.router_fit import synthetic_repository
model, data = synthetic_repository(4, 600, 0)
model.eval()
m2 = copy.deepcopy(model).to(memory_format=torch.channels_last)
print(os.getloadavg())
def t(f):
    return best_cpu_ms(f, 10, 5)
with torch.no_grad():
  for bs in (40, 64):
    x = data[1][0][:bs]
    for e in (None, 1, 3):
        ms, ref = t(lambda: model.features(x, e))
        ms2, r = t(lambda: m2.features(x, e))
        ms3, r3 = t(lambda: m2.features(x.contiguous(memory_format=torch.channels_last), e))
        print(bs, e, "nchw %.2f ms  cl %.2f ms cl-in %.2f" % (ms, ms2, ms3), torch.equal(ref, r), (ref - r).abs().max().item(), torch.equal(ref, r3))
