"""Fit the lda_weighted router on E synthetic tasks; save its discriminants, offsets, evidence and refit for a bit-identity check between two trees (PYTHONPATH=<tree> python THIS E OUT)."""
import sys, time, os, torch
torch.set_num_threads(1)
from benchmarks.studies.where_the_time_goes.router_fit import synthetic_repository
from avalanche_sdr.routers import make_router
E = int(sys.argv[1]); out = sys.argv[2]
model, data = synthetic_repository(E, 600, 0)
fitter = make_router("lda_weighted")
res = {}
for t in range(E):
    s = time.process_time()
    fitter.fit(model, t, *data[t], 2, new_entry=True)
    res[f"fit{t}"] = time.process_time() - s
k, d, o = model.__dict__["_lda_discriminants"]
res["disc"], res["off"] = d, o
x, y = data[0]
s = time.process_time(); fitter.before_repeat(model, 10_000 + E, 0, x, y + 0); res["evidence_s"] = time.process_time() - s
res["evidence"] = model.routing_state("lda_repeats")["counts"]
with torch.no_grad():
    for p in model.encoder.entry_parameters(E - 1): p.mul_(1.01)
s = time.process_time(); fitter.fit(model, E - 1, *data[E - 1], 2, new_entry=False, entry_updated=True); res["refit_s"] = time.process_time() - s
k, d, o = model.__dict__["_lda_discriminants"]; res["disc2"], res["off2"] = d, o
torch.save(res, out)
print(out, "last fit %.3f evidence %.3f refit %.3f load %s" % (res[f"fit{E-1}"], res["evidence_s"], res["refit_s"], os.getloadavg()))
