"""Training and evaluating the seq2seq models on the course's tasks, in TensorFlow.

Same names and signatures as ``attncourse.torch.train``; the batches, the
accuracy and the experiment are the framework-neutral ``attncourse.training``
(read its docstring for teacher forcing versus greedy decoding). The tasks
are the framework-free ``attncourse.data.Seq2SeqTask`` arrays; the models are
``attncourse.tf.Encoder`` / ``Decoder``.

The per-token GRU loops are Python loops, slow when run eagerly, so the
training step is compiled with ``tf.function`` (``make_train_step``). Tracing
it costs seconds, so ``train_seq2seq`` keeps one compiled step per
architecture and reuses it for every model of that shape (``_Trainer``).
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from attncourse import training
from attncourse.progress import progress

from .masking import sequence_mask
from .seq2seq import Decoder, Encoder, greedy_decode
from .weights import get_params, set_params

__all__ = [
    "build_seq2seq",
    "greedy_translate",
    "sequence_accuracy",
    "teacher_forced_predict",
    "train_and_evaluate",
    "train_seq2seq",
]


def build_seq2seq(task, attention, embed_dim, hidden_dim, bidirectional=True):
    """An (Encoder, Decoder) pair sized for ``task``: a bidirectional encoder
    unless ``bidirectional=False``; location attention gets the task's
    longest source as its fixed max_src_len."""
    encoder = Encoder(len(task.src_vocab), embed_dim, hidden_dim, bidirectional)
    decoder = Decoder(
        len(task.tgt_vocab),
        embed_dim,
        hidden_dim,
        attention,
        max_src_len=training.decoder_max_src_len(task, attention),
    )
    return encoder, decoder


def _src_mask(src_lens, src_len):
    return sequence_mask(src_lens, src_len)[:, 0]  # (batch, src_len), True = token


def _loss(encoder, decoder, src, src_lens, tgt_in, tgt_out):
    """Mean cross-entropy over the real (non-padding) target tokens."""
    enc_outputs, state = encoder(src, src_lens)  # (B, S, H), (B, H)
    logits, _ = decoder(
        tgt_in, state, enc_outputs, _src_mask(src_lens, src.shape[1])
    )  # (B, T, V)
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(tgt_out, logits)  # (B, T)
    real = tf.cast(tgt_out != 0, losses.dtype)  # 0 = <pad>
    return tf.reduce_sum(losses * real) / tf.reduce_sum(real)


def make_train_step(encoder, decoder, optimizer, clip_norm):
    """One compiled training step: teacher-forced loss, gradients clipped to
    a global norm of clip_norm, one Adam update. Returns the loss."""
    variables = encoder.trainable_variables + decoder.trainable_variables
    optimizer.build(variables)  # create Adam's slots now, not inside the trace

    @tf.function
    def train_step(src, src_lens, tgt_in, tgt_out):
        with tf.GradientTape() as tape:
            loss = _loss(encoder, decoder, src, src_lens, tgt_in, tgt_out)
        grads = tape.gradient(loss, variables)
        grads, _ = tf.clip_by_global_norm(grads, clip_norm)
        optimizer.apply_gradients(zip(grads, variables, strict=True))
        return loss

    return train_step


class _Trainer:
    """A private copy of one architecture with its compiled step.

    Tracing the step costs seconds (the loops over time steps unroll into
    the graph), so train_seq2seq keeps one per architecture and reuses it for
    every model of that shape: copy the model's weights in, reset Adam,
    train, copy the weights back. The numbers are those of a fresh trace.
    """

    def __init__(self, encoder, decoder, learning_rate, clip_norm):
        self.encoder = Encoder(
            encoder.vocab_size,
            encoder.embed_dim,
            encoder.hidden_dim,
            encoder.bidirectional,
        )
        self.decoder = Decoder(
            decoder.vocab_size,
            decoder.embed_dim,
            decoder.hidden_dim,
            decoder.attention,
            decoder.max_src_len,
        )
        self.optimizer = keras.optimizers.Adam(learning_rate)
        self.step = make_train_step(
            self.encoder, self.decoder, self.optimizer, clip_norm
        )
        self.fresh_optimizer = [v.numpy() for v in self.optimizer.variables]
        self.traced = {}  # batch shapes -> the step's concrete function

    def run(self, batch):
        """One step on a batch of tensors. A concrete function, because
        tf.function would retrace after every tf.random.set_seed."""
        shapes = tuple(tuple(a.shape) for a in batch)
        if shapes not in self.traced:
            self.traced[shapes] = self.step.get_concrete_function(*batch)
        return self.traced[shapes](*batch)

    def load(self, encoder, decoder):
        for mine, theirs in ((self.encoder, encoder), (self.decoder, decoder)):
            set_params(mine, get_params(theirs))
        for v, value in zip(
            self.optimizer.variables, self.fresh_optimizer, strict=True
        ):
            v.assign(value)

    def save(self, encoder, decoder):
        for mine, theirs in ((self.encoder, encoder), (self.decoder, decoder)):
            set_params(theirs, get_params(mine))


_TRAINERS: dict = {}


def _trainer(encoder, decoder, learning_rate, clip_norm):
    if type(encoder) is not Encoder or type(decoder) is not Decoder:
        raise TypeError(
            "train_seq2seq trains attncourse.tf.Encoder and Decoder, got "
            f"{type(encoder).__name__} and {type(decoder).__name__}"
        )
    key = (
        tuple(encoder.get_config()[k] for k in _ENCODER_KEYS),
        tuple(decoder.get_config()[k] for k in _DECODER_KEYS),
        float(learning_rate),
        float(clip_norm),
    )
    if key not in _TRAINERS:
        _TRAINERS[key] = _Trainer(encoder, decoder, learning_rate, clip_norm)
    return _TRAINERS[key]


_ENCODER_KEYS = ("vocab_size", "embed_dim", "hidden_dim", "bidirectional")
_DECODER_KEYS = ("vocab_size", "embed_dim", "hidden_dim", "attention", "max_src_len")


def train_seq2seq(
    encoder,
    decoder,
    task,
    steps,
    batch_size,
    learning_rate,
    clip_norm=1.0,
    seed=0,
    desc=None,
):
    """Adam on random minibatches of task.train; returns the losses (steps,).

    Each step draws batch_size training pairs without replacement (seeded by
    ``seed``), computes the teacher-forced loss and clips the gradient's
    global norm to clip_norm (``make_train_step``). A tqdm bar shows
    progress. The compiled step is traced once per architecture and reused
    for the next model of the same shape (``_Trainer``).
    """
    trainer = _trainer(encoder, decoder, learning_rate, clip_norm)
    trainer.load(encoder, decoder)
    losses = []
    bar = progress(
        training.minibatches(task.train, steps, batch_size, seed),
        total=steps,
        desc=desc or f"{decoder.attention} (tf)",
    )
    for batch in bar:
        loss = trainer.run([tf.constant(a) for a in batch])
        losses.append(float(loss))
        bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
    trainer.save(encoder, decoder)
    return np.array(losses)


def teacher_forced_predict(encoder, decoder, task, split="test"):
    """Next-token predictions when the decoder reads the TRUE previous tokens.

    Returns (tokens (N, T) int64, weights (N, T, S)) as NumPy arrays, T =
    task.max_tgt_len: row i, step t is the argmax after reading tgt_in[i, :t+1].
    """
    data = task.split(split)
    src, lens = tf.constant(data.src), tf.constant(data.src_lens)
    enc_outputs, state = encoder(src, lens)
    logits, weights = decoder(
        tf.constant(data.tgt_in), state, enc_outputs, _src_mask(lens, src.shape[1])
    )
    return tf.argmax(logits, -1).numpy(), weights.numpy()


def greedy_translate(encoder, decoder, task, split="test", max_len=None):
    """Greedy decoding of a split: the decoder reads its OWN previous output.

    Returns (tokens (N, steps) int64, weights (N, steps, S)) as NumPy arrays;
    max_len defaults to task.max_tgt_len (the longest target + <eos>).
    """
    data = task.split(split)
    v = task.tgt_vocab
    tokens, weights = greedy_decode(
        encoder,
        decoder,
        tf.constant(data.src),
        tf.constant(data.src_lens),
        v.bos_id,
        v.eos_id,
        max_len or task.max_tgt_len,
    )
    return tokens.numpy(), weights.numpy()


def sequence_accuracy(encoder, decoder, task, split="test"):
    """Exact-match accuracy of greedy translations: the fraction of sentences
    whose output, up to its first <eos>, equals the target exactly."""
    tokens, _ = greedy_translate(encoder, decoder, task, split)
    return training.exact_match(task, tokens, split)


def train_and_evaluate(task, attention, config, desc=None):
    """Seed, build, train with ``config`` (an attncourse.data.TrainConfig) and
    measure test exact-match accuracy. Returns an attncourse.data.TrainedModel
    (encoder, decoder, losses, accuracy, seconds)."""
    return training.run_experiment(sys.modules[__name__], task, attention, config, desc)
