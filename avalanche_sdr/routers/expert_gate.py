"""The ``"expert_gate"`` task-free router, a baseline (Aljundi et al., CVPR 2017).

One undercomplete autoencoder per entry on E0's features of its creating task
(:func:`~avalanche_sdr.detection.expert_gate.train_autoencoder`, Expert Gate's settings
:data:`~avalanche_sdr.detection.expert_gate.DEFAULT_EXPERT_GATE`); a sample goes to the
entry whose autoencoder reconstructs it best and is predicted with the head of that
entry's creating task.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import torch
from torch import Tensor

from avalanche_sdr.detection.expert_gate import DEFAULT_EXPERT_GATE, reconstruction_errors, train_autoencoder
from avalanche_sdr.models.task_data import TaskData
from avalanche_sdr.routers.base import Router, TaskFreePrediction, entry_key, heads_prediction, required_state
from avalanche_sdr.vocabulary import ROUTER_EXPERT_GATE


class ExpertGateRouter(Router):
    """The ``"expert_gate"`` router (module doc). No options."""

    name = ROUTER_EXPERT_GATE
    state_name = ROUTER_EXPERT_GATE

    def fit(self, model, data: TaskData, *, new_entry: bool, entry_updated: bool = False) -> None:
        """Store the autoencoder of a NEW entry (trained on E0 features of its creating
        task); nothing for a reused entry."""
        if not new_entry:
            return
        feats = data.e0_features(model).float()
        model.set_routing_state(entry_key(self.name, model.entry_of(data.task)),
                                train_autoencoder(feats, DEFAULT_EXPERT_GATE, data.task))

    def routable(self, model) -> Tuple[List[int], List[int]]:
        """The entries with an autoencoder, and their creating tasks (in entry order)."""
        entries = [e for e in model.entries if model.routing_state(entry_key(self.name, e))]
        return [model.entry_creator[e] for e in entries], entries

    def predict_routed(self, model, x: Tensor, e0: Tensor, features: Dict[int, Tensor], tasks: List[int],
                       entries: List[int]) -> TaskFreePrediction:
        errors = [reconstruction_errors(required_state(model, entry_key(self.name, e), self.name), e0) for e in entries]
        return heads_prediction(model, x, tasks, torch.stack(errors, dim=1).argmin(dim=1), features)


__all__ = ["ExpertGateRouter"]
