"""Wall ms per image of one eval-mode forward (E0 and a random entry) at several batch sizes,
for four models (:data:`CASES`): small CNN (32,64,128) on 1x28x28, the same on 1x8x8, CIFAR
ResNet-20 on 3x32x32 and on 1x28x28 grey (EMNIST's). One torch thread, min over 5
interleaved rounds, 1,024 images. Also the largest activation per image (elements) and
whether the features equal the first batch size's. From the repository root:

    python -m benchmarks.studies.where_the_time_goes.batch_models 4,8,16,32,64,128
"""
import os
import sys
import time
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch

from avalanche_sdr.models import build_sdr_model, cifar_resnet_backbone, small_cnn_backbone

CASES: Dict[str, Tuple[Callable[[], torch.nn.Module], Tuple[int, int, int]]] = {
    "small_cnn_28": (lambda: small_cnn_backbone(in_channels=1, widths=(32, 64, 128)), (1, 28, 28)),
    "small_cnn_8": (lambda: small_cnn_backbone(in_channels=1, widths=(32, 64, 128)), (1, 8, 8)),
    "resnet20_32": (lambda: cifar_resnet_backbone(20, in_channels=3), (3, 32, 32)),
    "resnet20_28grey": (lambda: cifar_resnet_backbone(20, in_channels=1), (1, 28, 28)),
}
"""Model name -> (E0 builder, input shape C x H x W)."""

DEFAULT_SIZES = (2, 4, 8, 16, 32, 64, 128, 256)
"""Batch sizes timed without an argument."""


def largest_activation(model, shape: Tuple[int, int, int], entry) -> int:
    """Elements of the largest output of a leaf module of ``model``'s encoder for one image
    of ``shape`` through ``entry`` (``None``: E0)."""
    sizes = []
    hooks = [m.register_forward_hook(lambda m, i, o: sizes.append(o.numel()) if torch.is_tensor(o) else None)
             for m in model.encoder.modules() if len(list(m.children())) == 0]
    with torch.no_grad():
        model.features(torch.zeros((1,) + shape), entry)
    for hook in hooks:
        hook.remove()
    return max(sizes)


def model_with_entry(make: Callable[[], torch.nn.Module], shape: Tuple[int, int, int]):
    """(model, entry): the backbone from ``make()`` with one entry whose adapters and BatchNorm
    copies moved by 0.05 * N(0, 1), seeded (``torch.manual_seed(0)``); a draw after it
    continues that RNG."""
    torch.manual_seed(0)
    model = build_sdr_model(make(), in_channels=shape[0], image_size=shape[1], generator=None)
    e = model.create_entry(0)
    with torch.no_grad():
        for p in model.encoder.entry_parameters(e):
            p.add_(0.05 * torch.randn_like(p))
    return model, e


def time_batch_sizes(model, entry, x: torch.Tensor, sizes: Sequence[int], rounds: int) -> Dict[str, Dict]:
    """Time ``model.batched_features`` of E0 and of ``entry`` on ``x`` at each batch size of
    ``sizes``, in ``rounds`` interleaved rounds.

    :return: ``{"ms": {(batch, "E0"|"entry"): least wall ms per image}, "equal": {batch:
        features bit-identical to the first batch size's}, "difference": {batch: largest
        |feature difference| against the first batch size's}}``.
    """
    best = {(bs, en): float("inf") for bs in sizes for en in (None, entry)}
    ref, same, diff = {}, {bs: True for bs in sizes}, {bs: 0.0 for bs in sizes}
    for _ in range(rounds):
        for bs in sizes:
            for en in (None, entry):
                t = time.perf_counter()
                f = model.batched_features(x, en, batch_size=bs)
                best[bs, en] = min(best[bs, en], (time.perf_counter() - t) / x.shape[0] * 1e3)
                ref.setdefault(en, f)
                same[bs] &= torch.equal(f, ref[en])
                diff[bs] = max(diff[bs], (f - ref[en]).abs().max().item())
    return {"ms": {(bs, "E0" if en is None else "entry"): ms for (bs, en), ms in best.items()}, "equal": same,
            "difference": diff}


def measure(sizes: Sequence[int] = DEFAULT_SIZES, images: int = 1024, rounds: int = 5,
            cases: Optional[Sequence[str]] = None) -> Dict[str, Dict[str, Any]]:
    """Time each case of ``cases`` (default: all of :data:`CASES`) with :func:`time_batch_sizes`
    on ``images`` random images (uniform in [0, 1]).

    :return: case -> :func:`time_batch_sizes`' dict with ``"largest_activation"`` (elements).
    """
    results = {}
    for name in cases or CASES:
        make, shape = CASES[name]
        model, e = model_with_entry(make, shape)
        model.eval()
        x = torch.rand((images,) + shape)
        results[name] = dict(time_batch_sizes(model, e, x, sizes, rounds),
                             largest_activation=largest_activation(model, shape, e))
    return results


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Print the tables; ``argv[0]``: comma-separated batch sizes (default :data:`DEFAULT_SIZES`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    torch.set_num_threads(1)
    sizes = [int(s) for s in argv[0].split(",")] if argv else list(DEFAULT_SIZES)
    print("load before:", os.getloadavg(), "threads", torch.get_num_threads())
    for name, result in measure(sizes).items():
        act = result["largest_activation"]
        print(f"\n{name}: largest activation {act} elements/img ({act * 4 / 1024:.0f} KiB)")
        print("| batch | E0 ms/img | entry ms/img | equal to batch %d |" % sizes[0])
        for bs in sizes:
            print(f"| {bs} | {result['ms'][bs, 'E0']:.3f} | {result['ms'][bs, 'entry']:.3f} | {result['equal'][bs]} |")
    print("load after:", os.getloadavg())


__all__ = ["CASES", "DEFAULT_SIZES", "largest_activation", "main", "measure", "model_with_entry",
           "time_batch_sizes"]

if __name__ == "__main__":
    main()
