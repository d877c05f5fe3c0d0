"""Training settings for :class:`~avalanche_sdr.training.SDRStrategy`.

Each preset is a plain dict of ``SDRStrategy`` keyword arguments, to be unpacked:
``SDRStrategy(model=model, **CPU_SETTINGS)``; override any key by passing it after.

``PAPER_SETTINGS`` are the values of the paper's supplementary material (§A.1):
classification models with newly trained extractors run 100 epochs, batch 128, lr
0.01 reduced by 0.1 at epoch 50; a reused extractor trains its head for 2 epochs at
lr 0.001; VAEs train with batch 64, lr 1e-4, up to 2000 epochs with early stopping.
The paper trains with Adam (its Algorithm 1). These settings are meant for a GPU.

``CPU_SETTINGS`` keep the method unchanged and shorten what is long: 10 epochs for a
new entry (step decay at epoch 7), batch 32, VAEs up to 20 epochs at lr 2e-3 with
patience 5. Head-only training of a reused entry keeps the paper's 2 epochs at lr
0.001. On very small tasks (the ~120-image digits tasks) those are 8 Adam steps, too
few for a fresh head: ``examples/quickstart.py`` raises them to 10 epochs at 0.01.
"""

PAPER_SETTINGS = dict(
    new_task_epochs=100,
    new_task_lr=0.01,
    lr_milestones=(50,),
    lr_decay=0.1,
    reuse_epochs=2,
    reuse_lr=0.001,
    train_mb_size=128,
    eval_mb_size=256,
    vae_epochs=2000,
    vae_lr=1e-4,
    vae_mb_size=64,
    vae_patience=20,
)

CPU_SETTINGS = dict(
    new_task_epochs=10,
    new_task_lr=0.01,
    lr_milestones=(7,),
    lr_decay=0.1,
    reuse_epochs=2,
    reuse_lr=0.001,
    train_mb_size=32,
    eval_mb_size=256,
    vae_epochs=20,
    vae_lr=2e-3,
    vae_mb_size=32,
    vae_patience=5,
)

__all__ = ["PAPER_SETTINGS", "CPU_SETTINGS"]
