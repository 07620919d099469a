"""Catalogued mistakes of ``transformer-block`` (rows of support.grading.B).

(assignment, student, part, edits, lost[, tag[, says]]): each edit replaces
code of the part's reference solution; ``lost`` are the cells that must
score 0, ``tag`` the likely mistake the feedback must name.
"""

A = "transformer-block"
HIDDEN = ("hidden-forward", "hidden-masks", "hidden-gradients")


def cells(part, *names):
    return [f"{part}-{n}" for n in names]


def everything(part):
    return cells(part, "visible", *HIDDEN)


def hidden(part):
    return cells(part, *HIDDEN)


PRE_LN_TF = (
    "        a = self.layer_norm(x, self.norm1_gamma, self.norm1_beta)\n"
    "        attn, weights = self.attention(a, padding_mask)\n"
    "        h = x + attn  # the residual stream itself is never normalised\n"
    "        z = self.layer_norm(h, self.norm2_gamma, self.norm2_beta)\n"
    "        y = h + self.feed_forward(z)\n"
)
POST_LN_TF = (
    "        attn, weights = self.attention(x, padding_mask)\n"
    "        h = self.layer_norm(x + attn, self.norm1_gamma, self.norm1_beta)\n"
    "        y = self.feed_forward(h)\n"
    "        y = self.layer_norm(h + y, self.norm2_gamma, self.norm2_beta)\n"
)
TORCH_NORM = (
    "        mean = z.mean(dim=-1, keepdim=True)\n"
    "        var = z.var(dim=-1, unbiased=False, keepdim=True)\n"
    "        return (z - mean) / torch.sqrt(var + 1e-5) * gamma + beta\n"
)
RMS_NORM = (
    "        mean_square = z.pow(2).mean(dim=-1, keepdim=True)\n"
    "        return z / torch.sqrt(mean_square + 1e-5) * gamma + beta\n"
)

ROWS = (
    # the first mistake: the 2017 paper's post-LN block; with every
    # weight 0 it is LN(LN(x)), not the identity (the visible test says so)
    (A, "bug1", "tf", [(PRE_LN_TF, POST_LN_TF)], everything("tf"), "post-ln"),
    # torch.var is unbiased by default
    (
        A,
        "bug1",
        "torch",
        [
            (
                "z.var(dim=-1, unbiased=False, keepdim=True)",
                "z.var(dim=-1, keepdim=True)",
            )
        ],
        hidden("torch"),
        "unbiased-variance",
    ),
    # keras.layers.LayerNormalization's default epsilon
    (
        A,
        "bug2",
        "tf",
        [("tf.sqrt(var + 1e-5)", "tf.sqrt(var + 1e-3)")],
        hidden("tf"),
        "layer-norm-epsilon",
    ),
    # the second mistake: LN(x) + f(LN(x))
    (
        A,
        "bug2",
        "torch",
        [
            ("h = x + attn  #", "h = a + attn  #"),
            ("y = h + self.feed_forward(z)", "y = z + self.feed_forward(z)"),
        ],
        everything("torch"),
        "residual-after-norm",
    ),
    # statistics over dim 1, the positions: the padding leaks into real tokens
    (
        A,
        "bug3",
        "tf",
        [
            (
                "tf.reduce_mean(z, axis=-1, keepdims=True)",
                "tf.reduce_mean(z, axis=1, keepdims=True)",
            ),
            (
                "tf.reduce_mean(tf.square(z - mean), axis=-1, keepdims=True)",
                "tf.reduce_mean(tf.square(z - mean), axis=1, keepdims=True)",
            ),
        ],
        everything("tf"),
        "layer-norm-axis",
    ),
    (
        A,
        "bug3",
        "torch",
        [("y = h + self.feed_forward(z)", "y = self.feed_forward(z)")],
        everything("torch"),
        "missing-ffn-residual",
    ),
    (
        A,
        "bug4",
        "tf",
        [
            (
                "tf.matmul(q, k, transpose_b=True) / math.sqrt(self.d_head)",
                "tf.matmul(q, k, transpose_b=True)",
            )
        ],
        hidden("tf"),
        "missing-scale",
    ),
    (
        A,
        "bug4",
        "torch",
        [
            (
                "return concat @ self.attn_W_o + self.attn_b_o, weights",
                "return concat, weights",
            )
        ],
        hidden("torch"),
        "missing-output-projection",
    ),
    (
        A,
        "bug5",
        "tf",
        [("tf.where(keep, scores, -1e9)", "tf.where(keep, -1e9, scores)")],
        cells("tf", "visible", "hidden-masks"),
        "inverted-mask",
    ),
    (
        A,
        "bug5",
        "torch",
        [(TORCH_NORM, RMS_NORM)],
        hidden("torch"),
        "rms-norm-instead-of-layer-norm",
    ),
    # tf.nn.gelu is exact by default: GELU where the block asks for ReLU
    (
        A,
        "bug6",
        "tf",
        [("tf.nn.relu(", "tf.nn.gelu(")],
        hidden("tf"),
        "gelu-instead-of-relu",
    ),
    (
        A,
        "bug6",
        "torch",
        [("scores.masked_fill(hidden, -1e9)", "scores.masked_fill(hidden, 0.0)")],
        cells("torch", "visible", "hidden-masks"),
        "mask-zero-fill",
    ),
    # copy-paste: norm1's gamma and beta before the feed-forward network too
    (
        A,
        "bug7",
        "tf",
        [
            (
                "z = self.layer_norm(h, self.norm2_gamma, self.norm2_beta)",
                "z = self.layer_norm(h, self.norm1_gamma, self.norm1_beta)",
            )
        ],
        hidden("tf"),
        "norm1-used-twice",
    ),
    (
        A,
        "bug7",
        "torch",
        [("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)")],
        everything("torch"),
        "softmax-axis",
    ),
    (
        A,
        "bug8",
        "tf",
        [("h = x + attn  #", "h = attn  #")],
        everything("tf"),
        "missing-attention-residual",
    ),
    (
        A,
        "bug8",
        "torch",
        [
            (
                "hidden = torch.relu(z @ self.ffn_W_1 + self.ffn_b_1)",
                "hidden = z @ self.ffn_W_1 + self.ffn_b_1",
            )
        ],
        hidden("torch"),
        "missing-activation",
    ),
    # the mask never reaches the attention
    (
        A,
        "bug9",
        "tf",
        [
            (
                "attn, weights = self.attention(a, padding_mask)",
                "attn, weights = self.attention(a)",
            )
        ],
        cells("tf", "visible", "hidden-masks"),
        "mask-ignored",
    ),
    (
        A,
        "bug9",
        "torch",
        [
            (
                "torch.sqrt(var + 1e-5) * gamma + beta",
                "torch.sqrt(var + 1e-5)",
            )
        ],
        hidden("torch"),
        "norm-without-gamma-beta",
    ),
    (
        A,
        "bug10",
        "tf",
        [("/ math.sqrt(self.d_head)", "/ math.sqrt(self.d_model)")],
        hidden("tf"),
        "scale-uses-d_model",
    ),
    # nn.TransformerEncoderLayer's fast path returns zeros at the padding
    (
        A,
        "bug10",
        "torch",
        [
            (
                "        y = h + self.feed_forward(z)\n",
                "        y = h + self.feed_forward(z)\n"
                "        if padding_mask is not None:\n"
                "            y = y * padding_mask[:, :, None]\n",
            )
        ],
        cells("torch", "hidden-masks"),
        "padding-outputs-zeroed",
    ),
)
