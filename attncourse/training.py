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

import attncourse.numpy as anp
from attncourse.data import TrainedModel

__all__ = [
    "decoder_max_src_len",
    "exact_match",
    "initial_params",
    "minibatches",
    "run_experiment",
]


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


def initial_params(task, attention, config):
    """The NumPy reference's initial weights for ``config``: (encoder params,
    decoder params), drawn from NumPy's global generator seeded with
    config.seed. Both frameworks start from them, so a TF and a PyTorch run
    with the same seed train the same network from the same point."""
    np.random.seed(config.seed)
    encoder = anp.Encoder(
        len(task.src_vocab), config.embed_dim, config.hidden_dim, config.bidirectional
    )
    decoder = anp.Decoder(
        len(task.tgt_vocab),
        config.embed_dim,
        config.hidden_dim,
        attention,
        max_src_len=decoder_max_src_len(task, attention),
    )
    return anp.get_params(encoder), anp.get_params(decoder)


def run_experiment(framework, task, attention, config, desc=None):
    """Build, initialise with ``initial_params``, train with ``config`` (a
    TrainConfig) and measure test exact-match accuracy with ``framework``'s
    build_seq2seq, train_seq2seq and sequence_accuracy. Returns a
    TrainedModel.

    The seed goes to NumPy only (initial weights and batches): seeding
    TensorFlow again would make it re-instantiate its compiled training step
    (seconds), and nothing in training draws from its generator.
    """
    start = time.perf_counter()
    encoder, decoder = framework.build_seq2seq(
        task, attention, config.embed_dim, config.hidden_dim, config.bidirectional
    )
    enc_params, dec_params = initial_params(task, attention, config)
    framework.set_params(encoder, enc_params)
    framework.set_params(decoder, dec_params)
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
