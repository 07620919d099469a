"""Spies on the optimizers, to see gradient clipping from the outside.

The losses alone cannot show that a trainer clips its gradients (Adam is
nearly scale-invariant), so these record the global L2 norm of the gradients
each Adam step is given: ``torch_step_norms`` wraps ``torch.optim.Adam.step``,
``tf_step_norms`` makes ``keras.optimizers.Adam`` a recording subclass (norms
kept in variables, so a compiled step records too). Both return a callable
giving the norms seen so far; ``assert_clipped`` checks them against the clip.
"""

import keras
import tensorflow as tf
import torch


def torch_step_norms(monkeypatch):
    norms = []
    real_step = torch.optim.Adam.step

    def step(self, *args, **kwargs):
        grads = [p.grad for group in self.param_groups for p in group["params"]
                 if p.grad is not None]  # fmt: skip
        norms.append(float(torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(g) for g in grads]))))  # fmt: skip
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", step)
    return lambda: list(norms)


def tf_step_norms(monkeypatch):
    class Recording(keras.optimizers.Adam):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.norms = tf.Variable(tf.zeros(8), trainable=False)
            self.count = tf.Variable(0, trainable=False)

        def apply_gradients(self, grads_and_vars):
            pairs = list(grads_and_vars)
            norm = tf.linalg.global_norm([g for g, _ in pairs])
            self.norms.scatter_nd_update([[self.count]], [norm])
            self.count.assign_add(1)
            return super().apply_gradients(pairs)

    made = []

    def adam(*args, **kwargs):
        made.append(Recording(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(keras.optimizers, "Adam", adam)

    def norms():
        (optimizer,) = made
        return [
            float(x) for x in optimizer.norms.numpy()[: int(optimizer.count.numpy())]
        ]

    return norms


def assert_clipped(norms, clip, steps):
    assert len(norms) == steps, norms
    assert max(norms) <= clip * (1 + 1e-4), norms
    assert min(norms) > clip / 2, norms  # clipped to the norm, not zeroed
