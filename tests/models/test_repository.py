"""SDRModel: entries, task map, heads, task-aware forward and what trains."""
import pytest
import torch

from avalanche_sdr.models import ConvVAE, build_sdr_model, small_cnn_backbone


def _model(**kwargs):
    torch.manual_seed(0)
    return build_sdr_model(
        small_cnn_backbone(in_channels=1, widths=(8, 16)), in_channels=1, image_size=8,
        latent_dim=4, vae_width=8, **kwargs,
    )


def _model_with_entries(*head_sizes):
    """:func:`_model` with one new entry per task t = 0, 1, ...: entry t is created for
    task t, then task t's head of ``head_sizes[t]`` classes is added."""
    model = _model()
    for task, classes in enumerate(head_sizes):
        model.create_entry(task=task)
        model.heads.add(task, classes)
    return model


def test_entries_and_task_map():
    model = _model()
    assert model.create_entry(task=0) == 0
    assert model.create_entry(task=1) == 1
    model.assign_task(2, 0)
    assert model.entries == [0, 1]
    assert model.task_to_entry == {0: 0, 1: 1, 2: 0}
    assert model.entry_creator == {0: 0, 1: 1}
    assert model.encoder.entries == [0, 1]
    assert model.generators.entries == [0, 1]
    with pytest.raises(KeyError, match="entry 5 does not exist"):
        model.assign_task(3, 5)
    with pytest.raises(KeyError, match="task 7 has not been trained"):
        model.entry_of(7)


def test_forward_pads_mixed_task_batches_with_lowest_logit():
    model = _model()
    model.create_entry(task=0)
    model.create_entry(task=1)
    model.heads.add(0, 2)
    model.heads.add(1, 5)
    model.eval()
    x = torch.rand(6, 1, 8, 8)
    tasks = torch.tensor([0, 1, 0, 1, 1, 0])
    out = model(x, tasks)
    assert out.shape == (6, 5)
    lowest = torch.finfo(out.dtype).min
    assert torch.all(out[tasks == 0, 2:] == lowest)
    assert torch.allclose(out[tasks == 0, :2], model.forward_single_task(x[tasks == 0], 0))
    assert torch.allclose(out[tasks == 1], model.forward_single_task(x[tasks == 1], 1))
    assert torch.all(out[tasks == 0].argmax(1) < 2)


def test_add_head_checks_class_count():
    model = _model()
    model.create_entry(task=0)
    model.heads.add(0, 3)
    model.heads.add(0, 3)  # idempotent
    with pytest.raises(ValueError, match="already has a head with 3 classes"):
        model.heads.add(0, 4)
    with pytest.raises(ValueError, match="at least one class"):
        model.heads.add(1, 0)


def test_reuse_trains_head_only_and_keeps_entry_statistics():
    model = _model_with_entries(2)
    model.assign_task(1, 0)
    model.heads.add(1, 2)
    before = {k: v.clone() for k, v in model.state_dict().items() if "heads.own.1." not in k}
    params = model.trainable_for(1, train_encoder_entry=False)
    assert {id(p) for p in params} == {id(p) for p in model.heads.module(1).parameters()}
    assert all(not p.requires_grad for n, p in model.named_parameters() if not n.startswith("heads.own.1."))
    model.train()
    optimizer = torch.optim.SGD(params, lr=0.1)
    for _ in range(3):
        loss = torch.nn.functional.cross_entropy(model(torch.rand(8, 1, 8, 8), 1), torch.randint(0, 2, (8,)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = model.state_dict()
    for key, value in before.items():
        torch.testing.assert_close(after[key], value, rtol=0, atol=0, equal_nan=True,
                                   msg=f"{key} changed while only head 1 trained")


def test_new_entry_trains_its_adapters_and_head_only():
    model = _model_with_entries(2, 2)
    params = model.trainable_for(1, train_encoder_entry=True)
    expected = list(model.heads.module(1).parameters()) + list(model.encoder.entry_parameters(1))
    assert {id(p) for p in params} == {id(p) for p in expected}
    model.freeze_all()
    assert not any(p.requires_grad for p in model.parameters())


def test_entry_bytes_counts_adapters_batchnorm_and_generator():
    from avalanche_sdr.evaluation.memory import entry_bytes

    model = _model()
    model.create_entry(task=0)
    expected = 0
    for m in model.encoder.entry_modules(0) + model.generators.entry_modules(0):
        expected += sum(t.numel() * t.element_size() for t in list(m.parameters()) + list(m.buffers()))
    assert entry_bytes(model, 0) == expected > 0


def test_build_rejects_bad_generator_options():
    with pytest.raises(ValueError, match="'independent', 'eft' or None"):
        _model(generator="gan")
    with pytest.raises(ValueError, match="needs base_vae"):
        _model(generator="eft")
    with pytest.raises(ValueError, match="models 1x16x16"):
        _model(generator="eft", base_vae=ConvVAE(1, 16, latent_dim=4, width=8))


def test_input_shape_is_what_the_generators_model():
    assert _model().input_shape == (1, 8, 8)
    eft = _model(generator="eft", base_vae=ConvVAE(1, 8, latent_dim=4, width=8))
    assert eft.input_shape == (1, 8, 8)


def test_build_rejects_a_backbone_for_another_channel_count():
    with pytest.raises(ValueError, match="backbone takes 3-channel images but in_channels=1"):
        build_sdr_model(small_cnn_backbone(in_channels=3, widths=(8, 16)), in_channels=1, image_size=8)


def test_layout_rebuilds_an_empty_repository_that_loads_the_state():
    model = _model_with_entries(2, 5)
    model.assign_task(2, 0)
    model.heads.add(2, 1)
    model.max_class_label = 5
    layout = model.layout()
    assert layout == {
        "entries": [[0, 0], [1, 1]],
        "task_to_entry": [[0, 0], [1, 1], [2, 0]],
        "heads": [[0, 2], [1, 5], [2, 1]],
        "max_class_label": 5,
        "detection_states": [],
    }
    torch.manual_seed(1)
    copy = _model()
    copy.restore_layout(layout)
    copy.load_state_dict(model.state_dict(), strict=True)
    assert copy.layout() == layout and copy.known_train_tasks_labels == {0, 1, 2}
    assert not any(p.requires_grad for p in copy.parameters())
    x = torch.rand(4, 1, 8, 8)
    model.eval(), copy.eval()
    for task in range(3):
        assert torch.equal(copy(x, task), model(x, task))
    with pytest.raises(RuntimeError, match="needs an empty repository"):
        copy.restore_layout(layout)


def test_a_state_dict_of_the_former_key_layout_loads():
    """Checkpoints written before the heads had a module of their own (keys ``heads.<t>``,
    ``head_class_ids.<t>``, ``head_permutations.<t>``) load into the current layout."""
    model = _model_with_entries(2, 2)
    model.assign_task(2, 0)
    model.link_head(2, 0, [1, 0])
    model.heads.set_class_ids(3, [4, 7])
    model.create_entry(task=3)
    model.heads.add(3, 2)
    former = {}
    for key, value in model.state_dict().items():
        for new, old in (("heads.own.", "heads."), ("heads.ids.", "head_class_ids."),
                         ("heads.perms.", "head_permutations.")):
            if key.startswith(new):
                key = old + key[len(new):]
                break
        former[key] = value
    assert "heads.0.weight" in former and "head_class_ids.3.ids" in former and "head_permutations.2.perm" in former
    copy = _model()
    copy.restore_layout(model.layout())
    copy.load_state_dict(former, strict=True)
    x = torch.rand(4, 1, 8, 8)
    model.eval(), copy.eval()
    for task in range(4):
        assert torch.equal(copy(x, task), model(x, task))
    assert copy.heads.class_ids(3) == [4, 7] and copy.heads.permutation(2) == [1, 0]


def test_task_data_computes_e0_features_once_and_equal_to_a_new_pass(monkeypatch):
    from avalanche_sdr.models import SDRModel, TaskData

    model = _model_with_entries(2)
    x = torch.rand(10, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    fresh = model.batched_features(x, None, 4)
    passes = []
    inner = SDRModel.batched_features

    def counted(self, images, entry, batch_size=None):
        passes.append((entry, batch_size, images is x))
        return inner(self, images, entry, batch_size)

    monkeypatch.setattr(SDRModel, "batched_features", counted)
    data = TaskData(0, x, torch.arange(10) % 2)
    first, second = data.e0_features(model, 4), data.e0_features(model, 4)
    assert passes == [(None, 4, True)]
    assert torch.equal(first, fresh) and torch.equal(second, fresh)
    second.add_(1.0)  # a caller's copy: what is kept does not change
    assert torch.equal(data.e0_features(model, 4), fresh) and len(passes) == 1
    # the same images under other labels share what is kept; another batch size: a new pass
    assert torch.equal(data.with_labels(1 - data.y).e0_features(model, 4), fresh) and len(passes) == 1
    data.e0_features(model, 5)
    data.e0_features(model, 5)
    assert len(passes) == 2
    # E0 changed by someone: its features are computed again, and kept from then on
    before = data.e0_features(model, 5)
    with torch.no_grad():
        next(p for n, p in model.encoder.named_parameters() if "adapters" not in n and "copies" not in n).add_(0.5)
    moved = data.e0_features(model, 5)
    assert len(passes) == 3 and not torch.equal(moved, before)
    assert torch.equal(moved, inner(model, x.clone(), None, 5))
    assert torch.equal(data.e0_features(model, 5), moved) and len(passes) == 3


def test_task_data_refuses_what_is_not_a_task():
    from avalanche_sdr.models import TaskData

    with pytest.raises(ValueError, match=r"\[n, C, H, W\] tensor of images"):
        TaskData(0, [[0.0]], torch.zeros(1, dtype=torch.long))
    with pytest.raises(ValueError, match="labels of the 3 images"):
        TaskData(0, torch.zeros(3, 1, 8, 8), torch.zeros(2, dtype=torch.long))
    data = TaskData(4, torch.zeros(3, 1, 8, 8), torch.tensor([0, 1, 1]), torch.tensor([4, 7]))
    assert data.num_classes == 2 and data.class_id_labels.tolist() == [4, 7, 7]
