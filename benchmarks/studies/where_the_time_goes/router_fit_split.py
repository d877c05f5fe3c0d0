"""CPU seconds of one LDA router fit at E entries, split into feature passes and the rest (PYTHONPATH=. python THIS E)."""
import time, sys, os, torch
torch.set_num_threads(1)
from benchmarks.studies.where_the_time_goes.router_fit import synthetic_repository
from avalanche_sdr.routers import make_router, lda_router as L
E = int(sys.argv[1]) if len(sys.argv) > 1 else 32
acc = {"feat": 0.0, "n": 0, "imgs": 0}
orig = L._features
def timed(model, x, space):
    s = time.process_time(); r = orig(model, x, space); acc["feat"] += time.process_time() - s; acc["n"] += 1; acc["imgs"] += x.shape[0]; return r
L._features = timed
origb = type(synthetic_repository(2, 8)[0]).batched_features
def timedb(self, x, e, batch_size=None):
    s = time.process_time(); r = origb(self, x, e, batch_size); acc["bf"] = acc.get("bf", 0) + time.process_time() - s; return r
model, data = synthetic_repository(E, 600, 0)
type(model).batched_features = timedb
fitter = make_router("lda_weighted")
for t in range(E - 1):
    fitter.fit(model, t, *data[t], 2, new_entry=True)
for rep in range(2):
    acc.update(feat=0.0, n=0, imgs=0, bf=0.0)
    model2 = model
    # refit same task as a fresh copy each rep: use deep copies
    import copy
    m = copy.deepcopy(model)
    s = time.process_time()
    fitter.fit(m, E - 1, *data[E - 1], 2, new_entry=True)
    tot = time.process_time() - s
    print(f"E={E} fit {tot:.3f} CPU s: entry/E0 feature passes {acc['feat']:.3f} ({acc['n']} calls, {acc['imgs']} imgs), batched_features {acc['bf']:.3f}, rest {tot-acc['feat']-acc['bf']:.3f}; load {os.getloadavg()[0]:.2f}")
