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


POST_LN = (
    "        attn, weights = self.attention(x, padding_mask)  # reads x itself\n"
    "        h = self.layer_norm(x + attn, self.norm1_gamma, self.norm1_beta)\n"
    "        f = self.feed_forward(h)\n"
    "        y = self.layer_norm(h + f, self.norm2_gamma, self.norm2_beta)\n"
)
PRE_LN = (
    "        a = self.layer_norm(x, self.norm1_gamma, self.norm1_beta)\n"
    "        attn, weights = self.attention(a, padding_mask)\n"
    "        h = x + attn\n"
    "        z = self.layer_norm(h, self.norm2_gamma, self.norm2_beta)\n"
    "        y = h + self.feed_forward(z)\n"
)
FINAL_NORM = "y = self.layer_norm(h + f, self.norm2_gamma, self.norm2_beta)"
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
    # the chapter's own block, written where the exercise asks for post-LN:
    # its output is not normalised (the visible test says so)
    (A, "bug1", "tf", [(POST_LN, PRE_LN)], everything("tf"), "pre-ln"),
    # torch.var is unbiased by default: each token's variance is 7/8
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
        everything("torch"),
        "unbiased-variance",
    ),
    # keras.layers.LayerNormalization's default epsilon: LN(LN(x)) drifts
    # from LN(x) (the visible test with the sublayers' weights 0)
    (
        A,
        "bug2",
        "tf",
        [("tf.sqrt(var + 1e-5)", "tf.sqrt(var + 1e-3)")],
        everything("tf"),
        "layer-norm-epsilon",
    ),
    # the norm wrapped around each sublayer's output: x + LN(MHA(x))
    (
        A,
        "bug2",
        "torch",
        [
            (
                "h = self.layer_norm(x + attn, self.norm1_gamma, self.norm1_beta)",
                "h = x + self.layer_norm(attn, self.norm1_gamma, self.norm1_beta)",
            ),
            (
                FINAL_NORM,
                "y = h + self.layer_norm(f, self.norm2_gamma, self.norm2_beta)",
            ),
        ],
        everything("torch"),
        "norm-on-branch",
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
    # with the sublayers' weights 0 the block returns LN(0) = 0, not LN(x)
    (
        A,
        "bug3",
        "torch",
        [("self.layer_norm(h + f,", "self.layer_norm(f,")],
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
    # no centring: the outputs' mean over the features is not 0 (visible)
    (
        A,
        "bug5",
        "torch",
        [(TORCH_NORM, RMS_NORM)],
        everything("torch"),
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
    # copy-paste: norm1's gamma and beta after the feed-forward network too
    (
        A,
        "bug7",
        "tf",
        [
            (
                FINAL_NORM,
                "y = self.layer_norm(h + f, self.norm1_gamma, self.norm1_beta)",
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
    # with the sublayers' weights 0 the block returns LN(0) = 0, not LN(x)
    (
        A,
        "bug8",
        "tf",
        [("self.layer_norm(x + attn,", "self.layer_norm(attn,")],
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
                "attn, weights = self.attention(x, padding_mask)",
                "attn, weights = self.attention(x)",
            )
        ],
        cells("tf", "visible", "hidden-masks"),
        "mask-ignored",
    ),
    # gamma 1 and beta 0 as created: only the hidden tests' weights show it
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
                f"        {FINAL_NORM}\n",
                f"        {FINAL_NORM}\n"
                "        if padding_mask is not None:\n"
                "            y = y * padding_mask[:, :, None]\n",
            )
        ],
        cells("torch", "hidden-masks"),
        "padding-outputs-zeroed",
    ),
    # the second norm left out: y = h + FFN(h) is not normalised (visible)
    (
        A,
        "bug11",
        "tf",
        [(FINAL_NORM, "y = h + f")],
        everything("tf"),
        "missing-second-norm",
    ),
    (
        A,
        "bug11",
        "torch",
        [(POST_LN, PRE_LN)],
        everything("torch"),
        "pre-ln",
    ),
)
