"""The whole model in channels-last memory format: bit-identity and CPU ms of its features against today's (PYTHONPATH=. python THIS)."""
import time, torch, copy, os
torch.set_num_threads(1)
from benchmarks.router_fit import synthetic_repository
model, data = synthetic_repository(4, 600, 0)
model.eval()
m2 = copy.deepcopy(model).to(memory_format=torch.channels_last)
print(os.getloadavg())
def t(f, n=10):
    best = 1e9
    for _ in range(5):
        s = time.process_time()
        for _ in range(n): r = f()
        best = min(best, (time.process_time()-s)/n)
    return best*1e3, r
with torch.no_grad():
  for bs in (40, 64):
    x = data[1][0][:bs]
    for e in (None, 1, 3):
        ms, ref = t(lambda: model.features(x, e))
        ms2, r = t(lambda: m2.features(x, e))
        ms3, r3 = t(lambda: m2.features(x.contiguous(memory_format=torch.channels_last), e))
        print(bs, e, "nchw %.2f ms  cl %.2f ms cl-in %.2f" % (ms, ms2, ms3), torch.equal(ref, r), (ref - r).abs().max().item(), torch.equal(ref, r3))
