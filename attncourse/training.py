"""The framework-neutral half of training and evaluating the seq2seq models.

``attncourse.tf.train`` and ``attncourse.torch.train`` hold the halves that
need a framework (the loss, the optimiser step, decoding); both use these
helpers, so the batches, the accuracy and the experiment are the same code.

Training is teacher forcing: the decoder reads the true previous token
(``tgt_in`` = <bos> + target) and is scored on the next one (``tgt_out`` =
target + <eos>) by cross-entropy averaged over the real target tokens. Test
accuracy is exact match under greedy decoding, where the decoder reads its
own previous prediction -- the only mode available at test time.
"""

import time

import numpy as np

from attncourse.data import TrainedModel
from attncourse.seed import set_seed

__all__ = ["decoder_max_src_len", "exact_match", "minibatches", "run_experiment"]


def decoder_max_src_len(task, attention):
    """The max_src_len a Decoder needs for ``task``: the task's longest source
    for location attention (one weight per position), None otherwise."""
    return task.max_src_len if attention == "location" else None


def minibatches(split, steps, batch_size, seed):
    """``steps`` batches of training arrays (src, src_lens, tgt_in, tgt_out).

    Each batch holds batch_size examples drawn without replacement (at most
    the whole split), from a generator seeded with ``seed``.
    """
    rng = np.random.default_rng(seed)
    arrays = (split.src, split.src_lens, split.tgt_in, split.tgt_out)
    batch_size = min(batch_size, len(split))
    for _ in range(steps):
        idx = rng.choice(len(split), batch_size, replace=False)
        yield tuple(a[idx] for a in arrays)


def exact_match(task, tokens, split="test"):
    """The fraction of sentences of ``split`` whose decoded ``tokens`` (N,
    steps), up to the first <eos>, equal the target exactly."""
    data = task.split(split)
    hits = [
        task.tgt_vocab.decode(row) == tgt
        for row, (_, tgt) in zip(tokens, data.pairs, strict=True)
    ]
    return float(np.mean(hits))


def run_experiment(framework, task, attention, config, desc=None):
    """Seed, build, train with ``config`` (a TrainConfig) and measure test
    exact-match accuracy with ``framework``'s build_seq2seq, train_seq2seq
    and sequence_accuracy. Returns a TrainedModel."""
    start = time.perf_counter()
    set_seed(config.seed)
    encoder, decoder = framework.build_seq2seq(
        task, attention, config.embed_dim, config.hidden_dim
    )
    losses = framework.train_seq2seq(
        encoder,
        decoder,
        task,
        config.steps,
        config.batch_size,
        config.learning_rate,
        config.clip_norm,
        config.seed,
        desc,
    )
    accuracy = framework.sequence_accuracy(encoder, decoder, task, "test")
    return TrainedModel(encoder, decoder, losses, accuracy, time.perf_counter() - start)
