"""Wall ms per image of one eval-mode forward (E0 and a random entry) at several batch sizes,
for four models (CASES): small CNN (32,64,128) on 1x28x28, the same on 1x8x8, CIFAR ResNet-20 on
3x32x32 and on 1x28x28 grey (EMNIST's). One torch thread, min over 5 interleaved rounds, 1,024 images.
Also the largest activation per image (elements) and whether features are equal to the first batch
size's. Run from the repository root: PYTHONPATH=. python docs/results/where_the_time_goes/batch_models.py 4,8,16,32,64,128"""
import os, sys, time
import torch
from avalanche_sdr.models import build_sdr_model, small_cnn_backbone, cifar_resnet_backbone
def largest_activation(model, shape, entry):
    sizes = []
    hooks = [m.register_forward_hook(lambda m, i, o: sizes.append(o.numel()) if torch.is_tensor(o) else None)
             for m in model.encoder.modules() if len(list(m.children())) == 0]
    with torch.no_grad():
        model.features(torch.zeros((1,) + shape), entry)
    for h in hooks: h.remove()
    return max(sizes)
CASES = {"small_cnn_28": (lambda: small_cnn_backbone(in_channels=1, widths=(32, 64, 128)), (1, 28, 28)),
         "small_cnn_8": (lambda: small_cnn_backbone(in_channels=1, widths=(32, 64, 128)), (1, 8, 8)),
         "resnet20_32": (lambda: cifar_resnet_backbone(20, in_channels=3), (3, 32, 32)),
         "resnet20_28grey": (lambda: cifar_resnet_backbone(20, in_channels=1), (1, 28, 28))}
def model_with_entry(make, shape):
    """(model, entry): the backbone from make() with one entry whose adapters and BatchNorm copies
    moved by 0.05 * N(0, 1), seeded (torch.manual_seed(0)), then x's draw continues that RNG."""
    torch.manual_seed(0)
    model = build_sdr_model(make(), in_channels=shape[0], image_size=shape[1], generator=None)
    e = model.create_entry(0)
    with torch.no_grad():
        for p in model.encoder.entry_parameters(e):
            p.add_(0.05 * torch.randn_like(p))
    return model, e
def main():
    torch.set_num_threads(1)
    sizes = [int(s) for s in sys.argv[1].split(",")] if len(sys.argv) > 1 else [2, 4, 8, 16, 32, 64, 128, 256]
    print("load before:", os.getloadavg(), "threads", torch.get_num_threads())
    for name, (make, shape) in CASES.items():
        model, e = model_with_entry(make, shape)
        model.eval()
        x = torch.rand((1024,) + shape)
        best = {(bs, en): float("inf") for bs in sizes for en in (None, e)}
        ref, same = {}, {bs: True for bs in sizes}
        for r in range(5):
            for bs in sizes:
                for entry in (None, e):
                    t = time.perf_counter()
                    f = model.batched_features(x, entry, batch_size=bs)
                    best[bs, entry] = min(best[bs, entry], (time.perf_counter() - t) / x.shape[0] * 1e3)
                    ref.setdefault(entry, f)
                    same[bs] &= torch.equal(f, ref[entry])
        act = largest_activation(model, shape, e)
        print(f"\n{name}: largest activation {act} elements/img ({act*4/1024:.0f} KiB)")
        print("| batch | E0 ms/img | entry ms/img | equal to batch %d |" % sizes[0])
        for bs in sizes:
            print(f"| {bs} | {best[bs, None]:.3f} | {best[bs, e]:.3f} | {same[bs]} |")
    print("load after:", os.getloadavg())
if __name__ == "__main__":
    main()
