"""The one exception graders raise, and how student errors are reported.

``GradingError`` is an ``AssertionError`` (nbgrader gives a test cell 0 points
for any error). In a Jupyter kernel it renders as its message only -- IPython
calls ``_render_traceback_`` instead of printing the stack -- so a failing
hidden test never shows the hidden test's own source lines, the grader's code
or the reference data in the student's feedback. Errors raised *by the
student's code* keep the student's own frames, which is what helps them.
"""

import os
import re
import traceback

# frames in the grader package (kernel side and grader side) are not the student's
_GRADING_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_RED, _RESET = "\x1b[0;31m", "\x1b[0m"
MAX_FRAMES = 8


class GradingError(AssertionError):
    """A test failed; the message says what is wrong and, if known, why."""

    def _render_traceback_(self):
        lines = str(self).splitlines() or [""]
        return [f"{_RED}{type(self).__name__}{_RESET}: {lines[0]}", *lines[1:]]


def _student_frames(tb) -> list[str]:
    """Formatted frames of ``tb`` after the last grader frame (the student's code)."""
    frames = traceback.extract_tb(tb)
    last_grader = max(
        (
            i
            for i, f in enumerate(frames)
            if os.path.abspath(f.filename).startswith(_GRADING_DIR)
        ),
        default=-1,
    )
    frames = frames[last_grader + 1 :]
    # framework internals say little: keep the student's frames and the last one
    frames = [
        f
        for i, f in enumerate(frames)
        if i == len(frames) - 1
        or not re.search(r"[/\\](site|dist)-packages[/\\]", f.filename)
    ]
    return traceback.format_list(frames[-MAX_FRAMES:])


_NUMBER = re.compile(r"-?\d+\.\d{3,}(?:[eE][-+]?\d+)?")
MAX_MESSAGE = 600


def redact(text: str) -> str:
    """Shorten a message and hide long decimals (they could be grader data)."""
    text = _NUMBER.sub("<number>", text)
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + " [...]"


# Framework errors a learner's attention code typically raises, and what they
# mean in the exercises' terms: (pattern in the message, pattern in the names
# of the frames it came through or None, advice). First match wins; kept here,
# inside the kernel, because only the kernel sees the exception. Patterns from
# the messages of PyTorch 2.x and TensorFlow 2.x / Keras 3.
_SHAPES = (
    "scores are (batch, n_q, n_k), or (batch, num_heads, n_q, n_k) once the "
    "heads are split"
)
_TRANSPOSE = (
    "transpose only the last two axes of the keys -- keys.transpose(-1, "
    "-2) or tf.matmul(q, k, transpose_b=True) -- never k.T or "
    "tf.transpose(k), which also move the batch (and head) axes"
)
KNOWN_ERRORS = (
    (
        r"is invalid for input of size",
        r"multi_head_attention_forward",
        "torch.nn.MultiheadAttention read your tensors with the wrong layout: "
        "without batch_first=True it expects (length, batch, features). Build it "
        "with batch_first=True (to_torch_mha does) and pass (batch, n, d_model) "
        "tensors; queries and keys have different lengths here.",
    ),
    (
        r"attn_mask",
        None,
        "a padding mask was passed as attn_mask: torch.nn.MultiheadAttention's "
        "attn_mask is (n_q, n_k) or (batch * num_heads, n_q, n_k); a (batch, n_k) "
        "mask of padding keys goes to key_padding_mask, True = NOT allowed.",
    ),
    (
        r"key_padding_mask|key_padded_mask",
        None,
        "key_padding_mask must be a bool tensor of shape (batch, n_k), True = a "
        "padding key (NOT allowed) -- the opposite of the course's key_mask.",
    ),
    (
        r"MultiHeadAttention.*(Incompatible shapes|broadcast)|`mask` must be "
        r"broadcastable to `inputs`",
        None,
        "keras.layers.MultiHeadAttention's attention_mask has shape (batch, n_q, "
        "n_k), True = attend; a (batch, n_k) key mask needs a query axis: "
        "key_mask[:, None, :].",
    ),
    (
        r"compatible batch dimensions|first two dimensions of batch2",
        None,
        "a batched matrix product got tensors whose batch axes do not line up: "
        + _TRANSPOSE
        + ".",
    ),
    (
        r"must match the size of tensor b|Incompatible shapes|must be broadcastable",
        None,
        "two tensors' shapes do not broadcast (the sizes are in the message). "
        "Usually either the keys are transposed on the wrong axes -- "
        + _TRANSPOSE
        + " -- or a mask lacks the singleton axes it is shared over: "
        + _SHAPES
        + ", so a padding mask needs shape (batch, 1, n_k) or (batch, 1, "
        "1, n_k), with the keys on the LAST axis.",
    ),
    (
        r"mat1 and mat2 shapes|Matrix size-incompatible|size mismatch",
        None,
        "a matrix product has mismatched inner sizes: x @ W needs W of shape "
        "(d_in, d_out) (the course's layout, not nn.Linear's (d_out, d_in)); check "
        "which weight multiplies which tensor.",
    ),
    (
        r"same dtype|expected scalar type|expected to be a (float|double|half) "
        r"tensor but is a (float|double|half)",
        None,
        "float32 and float64 tensors are mixed: the inputs are float32, but a "
        "tensor made from a NumPy array (float64 by default) or a np.float64 "
        "constant is float64. Convert it (torch.as_tensor(x, dtype=queries.dtype), "
        "tf.cast(x, queries.dtype)) or use math.sqrt for scalars.",
    ),
    (
        r"only supports boolean masks|expected to be a bool tensor|only implemented "
        r"on integer and Boolean|Op:Invert",
        None,
        "a mask is used as a boolean (masked_fill, tf.where, ~, logical_not) but is "
        "not bool: keep masks bool, True = attend; convert with mask.bool() / "
        "tf.cast(mask, tf.bool).",
    ),
    (
        r"view size is not compatible",
        None,
        ".view() after .transpose(): the tensor is no longer contiguous. Use "
        ".reshape(...) (or .contiguous().view(...)); merging heads is "
        "x.transpose(1, 2).reshape(batch, n, d_model).",
    ),
    (
        r"is invalid for input of size|Input to reshape is a tensor with",
        None,
        "a reshape asks for a different number of entries than the tensor has: "
        "(batch, n, d_model) splits into (batch, n, num_heads, d_head) with "
        "num_heads * d_head = d_model; take n from the tensor itself (x.shape[1]), "
        "queries and keys have different lengths.",
    ),
    (
        r"Dimension out of range|must be in the range \[|expects a vector of size",
        None,
        "an axis that does not exist: the tensor has fewer axes than the code "
        "assumes. S" + _SHAPES[1:] + "; prefer negative axes (-1 = keys).",
    ),
    (
        r"must be Tensor, not numpy|not numpy\.ndarray",
        None,
        "a NumPy array reached a framework function: keep every step in "
        "TensorFlow / PyTorch tensors.",
    ),
    (
        r"unexpected keyword argument|missing \d+ required positional argument|"
        r"takes \d+ positional arguments? but \d+ (were|was) given",
        None,
        "the call does not fit your signature: keep the parameters (names and "
        "order) that the exercise's interface gives.",
    ),
)
_KNOWN = tuple(
    (re.compile(m, re.S), f and re.compile(f), advice) for m, f, advice in KNOWN_ERRORS
)
_TF_NOISE = re.compile(r"\{\{function_node [^}]*\}\}\s*|\x1b\[[0-9;]*m")


def explain(exc: BaseException) -> str:
    """Plain advice for a recognisable framework error, or ""."""
    text = str(exc)[:4000]  # framework messages are short; bound the search
    frames = " ".join(f.name for f in traceback.extract_tb(exc.__traceback__))
    for message, frame, advice in _KNOWN:
        if message.search(text) and (frame is None or frame.search(frames)):
            return advice
    return ""


def student_error(what: str, exc: BaseException) -> GradingError:
    """A GradingError describing an exception raised inside the student's code."""
    if isinstance(exc, GradingError):
        return exc
    name = type(exc).__name__
    if isinstance(exc, NotImplementedError):
        head = f"{what} is not implemented yet (it raised NotImplementedError)."
    else:
        message = redact(_TF_NOISE.sub("", str(exc))).strip().splitlines()
        first = message[0] if message else ""
        head = f"{what} raised {name}: {first}"
        if len(message) > 1:
            head += "\n" + "\n".join(message[1:12])
        advice = explain(exc)
        if advice:
            head += f"\nWhat this usually means: {advice}"
    frames = _student_frames(exc.__traceback__)
    if frames and not isinstance(exc, NotImplementedError):
        head += "\nWhere (your code last):\n" + "".join(frames).rstrip()
    return GradingError(head)


def call_student(what: str, fn, *args, **kwargs):
    """Call student code; any exception becomes a GradingError naming ``what``."""
    try:
        return fn(*args, **kwargs)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001  (student code may raise anything)
        raise student_error(what, exc) from None


def internal_error(exc: BaseException, log_dir=None) -> GradingError:
    """A grader bug: tell the student little (no data), log the details.

    The traceback goes to ``<log_dir>/grader-errors.log`` (by default the
    notebook's ``hidden/`` folder, which never reaches students)."""
    import datetime
    from pathlib import Path

    log_dir = Path(log_dir) if log_dir is not None else Path.cwd() / "hidden"
    if log_dir.is_dir():
        with open(log_dir / "grader-errors.log", "a") as log:
            log.write(f"--- {datetime.datetime.now().isoformat()}\n")
            log.write("".join(traceback.format_exception(exc)))
    return GradingError(
        f"the grader could not check your code ({type(exc).__name__}); this is "
        f"probably not your mistake -- tell your instructor"
    )
