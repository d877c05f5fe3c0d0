"""One task's training data as SDR's parts read it: images, labels, class ids, E0's features.

:class:`TaskData` is built once per training experience by
:class:`~avalanche_sdr.training.SDRPlugin` and handed to the detector (``detect``,
``remember``), the learning reuse and the task-free routers (``fit``,
``before_repeat``). E0's features of its images are computed on first use and kept for
the experience (:meth:`TaskData.e0_features`), so the detector and every router's fit
read one pass instead of one each.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch
from torch import Tensor

from avalanche_sdr._batching import eval_batch_size
from avalanche_sdr.models.digests import backbone_state_digest


class TaskData:
    """A task's training data (module doc).

    :param task: the task label.
    :param x: [n, C, H, W] float images in [0, 1].
    :param y: [n] int64 local labels 0..c-1 (every class present).
    :param class_ids: [c] int64, the class id of each local label (the dataset's labels);
        ``None``: the local labels are the class ids (``0..c-1``).
    """

    def __init__(self, task: int, x: Tensor, y: Tensor, class_ids: Optional[Tensor] = None):
        if not isinstance(x, Tensor) or x.dim() != 4:
            raise ValueError(f"x must be a [n, C, H, W] tensor of images, got {type(x).__name__}"
                             f"{' of shape ' + str(tuple(x.shape)) if isinstance(x, Tensor) else ''}")
        if not isinstance(y, Tensor) or y.shape != (x.shape[0],):
            raise ValueError(f"y must be [n] labels of the {x.shape[0]} images, got "
                             f"{tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__}")
        self.task = int(task)
        self.x = x
        self.y = y
        self.num_classes = int(y.max()) + 1 if y.numel() else 0
        """c, the number of classes (local labels 0..c-1)."""
        self.class_ids = (torch.arange(self.num_classes) if class_ids is None
                          else torch.as_tensor(class_ids, dtype=torch.long))
        self._e0: Dict[str, Any] = {}  # shared with with_labels() copies: same images

    def with_labels(self, y: Tensor) -> "TaskData":
        """The same images (and the E0 features kept of them) with other labels ``y`` [n],
        e.g. the task's labels in its head's class order."""
        other = TaskData(self.task, self.x, y, None)
        other._e0 = self._e0
        return other

    @property
    def class_id_labels(self) -> Tensor:
        """[n] int64: each image's class id (``class_ids[y]``)."""
        return self.class_ids[self.y.cpu()]

    def e0_features(self, model, batch_size: Optional[int] = None) -> Tensor:
        """E0's features of the images: ``model.batched_features(x, None, batch_size)``,
        computed once for a batch size and then copied, as long as E0 is unchanged
        (:func:`~avalanche_sdr.models.digests.backbone_state_digest`, checked on every
        read): the values are those of a new pass.

        :param model: the repository (:class:`~avalanche_sdr.models.SDRModel`).
        :param batch_size: images per forward pass; ``None``: chosen for the model's device.
        :return: [n, D] float32 on the CPU (a copy: the caller may change it).
        """
        device = next(model.parameters()).device
        size = eval_batch_size(device, batch_size)
        digest = backbone_state_digest(model)
        kept = self._e0
        if kept.get("model") is model and kept.get("batch_size") == size and kept.get("digest") == digest:
            return kept["features"].clone()
        features = model.batched_features(self.x, None, size)
        kept.update(model=model, batch_size=size, digest=digest, features=features.clone())
        return features


__all__ = ["TaskData"]
