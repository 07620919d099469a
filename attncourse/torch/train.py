"""Training and evaluating the seq2seq models on the course's tasks, in PyTorch.

Same names and signatures as ``attncourse.tf.train``; the batches, the
accuracy and the experiment are the framework-neutral ``attncourse.training``
(read its docstring for teacher forcing versus greedy decoding). The tasks
are the framework-free ``attncourse.data.Seq2SeqTask`` arrays; the models are
``attncourse.torch.Encoder`` / ``Decoder``. Every helper here moves the
task's arrays to the device of the decoder's parameters (the modules stay
where they are) and returns NumPy arrays on the host.
"""

import sys

import numpy as np
import torch

from attncourse import training
from attncourse.progress import progress

from .masking import sequence_mask
from .seq2seq import Decoder, Encoder, greedy_decode
from .weights import set_params  # noqa: F401  (training.run_experiment uses it)

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


def _device(module):
    """Where a module's parameters live: the batches go there."""
    return next(module.parameters()).device


def _src_mask(src_lens, src_len):
    return sequence_mask(src_lens, src_len)[:, 0]  # (batch, src_len), True = token


def _loss(encoder, decoder, src, src_lens, tgt_in, tgt_out):
    """Mean cross-entropy over the real (non-padding) target tokens."""
    enc_outputs, state = encoder(src, src_lens)  # (B, S, H), (B, H)
    logits, _ = decoder(
        tgt_in, state, enc_outputs, _src_mask(src_lens, src.shape[1])
    )  # (B, T, V)
    losses = torch.nn.functional.cross_entropy(
        logits.transpose(1, 2), tgt_out, reduction="none"
    )  # (B, T)
    real = (tgt_out != 0).to(losses.dtype)  # 0 = <pad>
    return (losses * real).sum() / real.sum()


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
    global norm to clip_norm. A tqdm bar shows progress. The modules are in
    training mode while it runs and in evaluation mode when it returns.
    """
    params = list(encoder.parameters()) + list(decoder.parameters())
    optimizer = torch.optim.Adam(params, lr=learning_rate)
    losses = []
    encoder.train()
    decoder.train()
    bar = progress(
        training.minibatches(task.train, steps, batch_size, seed),
        total=steps,
        desc=desc or f"{decoder.attention} (torch)",
    )
    device = _device(decoder)
    for batch in bar:
        loss = _loss(
            encoder, decoder, *(torch.as_tensor(a, device=device) for a in batch)
        )
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, clip_norm)
        optimizer.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
    encoder.eval()
    decoder.eval()
    return np.array(losses)


@torch.no_grad()
def teacher_forced_predict(encoder, decoder, task, split="test"):
    """Next-token predictions when the decoder reads the TRUE previous tokens.

    Returns (tokens (N, T) int64, weights (N, T, S)) as NumPy arrays, T =
    task.max_tgt_len: row i, step t is the argmax after reading tgt_in[i, :t+1].
    """
    data, device = task.split(split), _device(decoder)
    src, lens, tgt_in = (
        torch.as_tensor(a, device=device)
        for a in (data.src, data.src_lens, data.tgt_in)
    )
    enc_outputs, state = encoder(src, lens)
    logits, weights = decoder(tgt_in, state, enc_outputs, _src_mask(lens, src.shape[1]))
    return logits.argmax(-1).cpu().numpy(), weights.cpu().numpy()


def greedy_translate(encoder, decoder, task, split="test", max_len=None):
    """Greedy decoding of a split: the decoder reads its OWN previous output.

    Returns (tokens (N, steps) int64, weights (N, steps, S)) as NumPy arrays;
    max_len defaults to task.max_tgt_len (the longest target + <eos>).
    """
    data, device = task.split(split), _device(decoder)
    v = task.tgt_vocab
    tokens, weights = greedy_decode(
        encoder,
        decoder,
        torch.as_tensor(data.src, device=device),
        torch.as_tensor(data.src_lens, device=device),
        v.bos_id,
        v.eos_id,
        max_len or task.max_tgt_len,
    )
    return tokens.cpu().numpy(), weights.cpu().numpy()


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
