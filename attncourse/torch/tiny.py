"""A tiny decoder-only Transformer in PyTorch, its training loop and the
head scores. Same maths, parameter names and signatures as
``attncourse.numpy.tiny`` (read its docstring):

    x = E[tokens] (+ P[:n]);  x = x + MHA(x) per layer (+ FFN(x) if mlp);
    logits = x @ W_U + b_U   (layer_norm=True: pre-LN before each sublayer).

``train_tiny`` trains on next-token cross-entropy with Adam, on minibatches
drawn by ``attncourse.tasks.batch_indices`` (the TF loop draws the same).
"""

import math

import numpy as np
import torch
from torch import nn

from attncourse import checks, tasks
from attncourse.numpy.tiny import _initial_value, tiny_param_shapes

from . import positional
from .masking import causal_mask, masked_softmax
from .multihead import merge_heads, split_heads
from .sparse import banded_attention, elu_feature_map, linear_attention_on_features

__all__ = [
    "TinyTransformer",
    "induction_score",
    "next_token_loss",
    "repeat_mask",
    "previous_token_score",
    "tiny_param_shapes",
    "tiny_transformer",
    "train_tiny",
]


def _layer_norm(x, p, prefix, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * p[prefix + "gamma"] + p[prefix + "beta"]


def attention_sublayer(x, p, pre, num_heads, positions, head_mask, attention, window):
    """Causal multi-head self-attention of one layer; returns (out, weights):
    softmax weights (batch, heads, n, n), the band (batch, heads, n, window)
    for "window", None for "linear" (it forms no weights)."""
    n = x.shape[1]
    q, k, v = (
        split_heads(x @ p[f"{pre}W_{c}"] + p[f"{pre}b_{c}"], num_heads) for c in "qkv"
    )  # each (batch, heads, n, d_head)
    if positions == "rope":
        q, k = positional.apply_rope(q), positional.apply_rope(k)
    if attention == "window":  # the band of the last `window` keys
        scale = 1.0 / math.sqrt(q.shape[-1])
        heads, weights = banded_attention(q, k, v, window, True, scale)
    elif attention == "linear":  # elu + 1 features, a running state
        heads = linear_attention_on_features(
            elu_feature_map(q), elu_feature_map(k), v, True, 1e-6
        )
        weights = None
    else:  # softmax over the (n, n) causal scores
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if positions == "alibi":
            scores = scores + positional.alibi_bias(num_heads, n).to(scores)
        mask = causal_mask(n).to(scores.device)
        weights = masked_softmax(scores, mask)  # (batch, heads, n, n)
        heads = weights @ v  # (batch, heads, n, d_head)
    if head_mask is not None:
        heads = heads * head_mask.to(heads)[:, None, None]
    return merge_heads(heads) @ p[f"{pre}W_o"] + p[f"{pre}b_o"], weights


def tiny_transformer(
    tokens,
    params,
    num_heads,
    num_layers,
    *,
    positions="learned",
    mlp=False,
    layer_norm=False,
    head_mask=None,
    attention="softmax",
    window=None,
):
    """The forward pass with the parameters ``params`` (tiny_param_shapes).

    tokens (batch, n) int; head_mask: optional (num_layers, num_heads)
    factors on each head's output (0 = ablate that head); attention
    "softmax", "linear" or "window" (with window=w), see TinyTransformer.
    Returns (logits (batch, n, vocab_size), [weights per layer]): (batch,
    heads, n, n) for softmax, the band (batch, heads, n, w) for "window"
    (sparse.sliding_window_attention's layout), None for "linear".
    """
    checks.tiny_attention(attention, window, positions)
    p = params
    x = p["embed"][tokens]  # (batch, n, d_model)
    n, d_model = tokens.shape[1], x.shape[-1]
    if positions == "learned":
        x = x + p["pos"][:n]
    elif positions == "sinusoidal":
        x = x + positional.sinusoidal_positional_encoding(n, d_model).to(x)

    def norm(x, prefix):  # pre-LN, or the identity (the default)
        return _layer_norm(x, p, prefix) if layer_norm else x

    all_weights = []
    for layer in range(num_layers):
        pre = f"layer{layer}."
        mask = None if head_mask is None else head_mask[layer]
        out, weights = attention_sublayer(
            norm(x, pre + "norm1."),
            p,
            pre + "attn.",
            num_heads,
            positions,
            mask,
            attention,
            window,
        )
        x = x + out  # the residual stream
        all_weights.append(weights)
        if mlp:
            h = norm(x, pre + "norm2.") @ p[pre + "ffn.W_1"]
            h = torch.relu(h + p[pre + "ffn.b_1"])
            x = x + h @ p[pre + "ffn.W_2"] + p[pre + "ffn.b_2"]
    logits = norm(x, "norm_f.") @ p["unembed.W"] + p["unembed.b"]
    return logits, all_weights


def _key(name):
    return name.replace(".", "__")  # nn.ParameterDict keys cannot hold "."


class TinyTransformer(nn.Module):
    """A decoder-only Transformer (see ``attncourse.numpy.TinyTransformer``).

    ``model.params`` maps the canonical names of tiny_param_shapes to the
    parameters; initial values as the NumPy model's, from torch's generator.
    """

    def __init__(
        self,
        vocab_size,
        d_model,
        num_heads,
        num_layers,
        max_len,
        *,
        mlp=False,
        positions="learned",
        layer_norm=False,
        d_ff=None,
        attention="softmax",
        window=None,
        seed=None,
    ):
        super().__init__()
        checks.tiny_sizes(
            vocab_size, d_model, num_heads, num_layers, max_len, positions
        )
        self.vocab_size, self.d_model = int(vocab_size), int(d_model)
        self.num_heads, self.num_layers = int(num_heads), int(num_layers)
        self.max_len, self.mlp, self.positions = int(max_len), mlp, positions
        self.layer_norm = bool(layer_norm)
        checks.tiny_attention(attention, window, positions)
        self.attention = attention
        self.window = None if window is None else int(window)
        shapes = tiny_param_shapes(
            vocab_size,
            d_model,
            num_layers,
            max_len,
            mlp=mlp,
            positions=positions,
            layer_norm=layer_norm,
            d_ff=d_ff,
        )
        self._names = list(shapes)
        # seed: the NumPy model's initial values (the same for any framework)
        rng = None if seed is None else np.random.default_rng(seed)
        self.weights = nn.ParameterDict(
            {
                _key(k): nn.Parameter(
                    _initial(k, s)
                    if rng is None
                    else torch.tensor(_initial_value(k, s, rng), dtype=torch.float32)
                )
                for k, s in shapes.items()
            }
        )

    @property
    def params(self) -> dict:
        """name -> parameter, in the layout of tiny_param_shapes."""
        return {name: self.weights[_key(name)] for name in self._names}

    def forward(self, tokens, return_weights=False, head_mask=None):
        """logits (batch, n, vocab_size), plus the list of per-layer weights
        if return_weights: (batch, heads, n, n) for softmax, the band (batch,
        heads, n, window) for "window", None for "linear"."""
        device = _device_of(self)  # inputs follow the parameters
        tokens = _token_tensor(tokens, device)
        checks.tiny_tokens(tokens, self.vocab_size, self.max_len, self.positions)
        if head_mask is not None:
            head_mask = torch.as_tensor(head_mask, device=device)
            checks.head_mask_input(head_mask, self.num_layers, self.num_heads)
        logits, weights = tiny_transformer(
            tokens,
            self.params,
            self.num_heads,
            self.num_layers,
            positions=self.positions,
            mlp=self.mlp,
            layer_norm=self.layer_norm,
            head_mask=head_mask,
            attention=self.attention,
            window=self.window,
        )
        return (logits, weights) if return_weights else logits


def _initial(name, shape):
    """As attncourse.numpy.tiny's initial values, drawn by torch."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "gamma":
        return torch.ones(shape)
    if leaf.startswith(("b", "beta")):
        return torch.zeros(shape)
    if name in ("embed", "pos"):
        return torch.randn(shape) / math.sqrt(shape[1])
    limit = math.sqrt(6.0 / (shape[0] + shape[1]))
    return torch.empty(shape).uniform_(-limit, limit)


def _device_of(module):
    """Where a module's parameters live (the CPU for one without any): the
    helpers below put every tensor they make or convert there."""
    return next(module.parameters(), torch.empty(0)).device


def _token_tensor(tokens, device):
    """Token ids as an int tensor on ``device`` (NumPy arrays, lists and tensors
    on any device alike)."""
    if not isinstance(tokens, torch.Tensor):
        tokens = torch.as_tensor(np.asarray(tokens))
    return tokens.to(device)


def repeat_mask(tokens):
    """bool (batch, n - 1): True where position i < n - 1 holds a token that
    occurred earlier in its row (where an induction head can predict i + 1)."""
    n = tokens.shape[1]
    same = tokens[:, :, None] == tokens[:, None, :]  # (batch, i, j)
    below = torch.ones(n, n, dtype=torch.bool, device=same.device).tril(-1)
    return (same & below).any(dim=2)[:, :-1]


def next_token_loss(logits, tokens, only_repeats=False):
    """Mean cross-entropy of logits[:, i] against tokens[:, i + 1], over all
    positions i < n - 1 or, with only_repeats, over those whose token
    occurred earlier in the row (repeat_mask): the second copy of an
    induction_task row."""
    losses = nn.functional.cross_entropy(
        logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none"
    )  # (batch, n - 1)
    if not only_repeats:
        return losses.mean()
    mask = repeat_mask(tokens).to(losses)
    return (losses * mask).sum() / mask.sum().clamp(min=1.0)


def train_tiny(
    model,
    tokens,
    steps,
    batch_size,
    learning_rate,
    *,
    seed=0,
    only_repeats=False,
    clip_norm=1.0,
):
    """Adam on next_token_loss; returns the losses (steps,) as NumPy.

    tokens: int (N, n) training rows; step s uses rows
    ``tasks.batch_indices(N, steps, batch_size, seed)[s]``, so a TF model
    trained with the same arguments sees the same batches. The gradient's
    global norm is clipped to clip_norm. The tokens go to the model's device
    (wherever they start); the model is not moved.
    """
    device = _device_of(model)
    tokens = _token_tensor(tokens, device)
    checks.tiny_tokens(tokens, model.vocab_size, model.max_len, model.positions)
    rows = tasks.batch_indices(len(tokens), steps, batch_size, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    losses = np.zeros(int(steps))
    for step, batch in enumerate(torch.as_tensor(rows, device=device)):
        x = tokens[batch]  # (batch_size, n)
        loss = next_token_loss(model(x), x, only_repeats)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        optimizer.step()
        losses[step] = loss.item()
    return losses


def previous_token_score(weights):
    """(heads,): each head's mean weight on the previous token, over the
    batch and the queries i >= 1 (weights[b, h, i, i - 1]); 1 = a pure
    previous-token head. weights (batch, heads, n, n), n >= 2."""
    weights = torch.as_tensor(weights)
    checks.head_weights_input(weights)
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 2))


def induction_score(weights, tokens):
    """(heads,): each head's mean weight on the token AFTER an earlier copy of
    the current token, sum over j < i with tokens[b, j] == tokens[b, i] of
    weights[b, h, i, j + 1], averaged over the queries (b, i) whose token
    occurred before; 1 = a pure induction head. weights (batch, heads, n, n),
    tokens int (batch, n); no repeated token -> ValueError."""
    weights = torch.as_tensor(weights)
    tokens = _token_tensor(tokens, weights.device)
    checks.induction_score_inputs(weights, tokens)
    n = tokens.shape[1]
    same = tokens[:, :, None] == tokens[:, None, :]  # (batch, i, j)
    below = torch.ones(n, n, dtype=torch.bool, device=same.device).tril(-1)
    earlier = same & below  # j < i
    repeated = earlier.any(dim=2)  # (batch, i): the set Q
    checks.check_repeated_tokens(int(repeated.sum()), tuple(tokens.shape))
    # j + 1 <= i for every j < i: pair key column j with weight column j + 1
    total = torch.einsum(
        "bij,bhij->h", earlier[:, :, :-1].to(weights), weights[..., 1:]
    )
    return total / repeated.sum()
