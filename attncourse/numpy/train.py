"""Training needs gradients, which the NumPy reference does not compute.

The names exist so that ``attncourse.numpy``, ``attncourse.tf`` and
``attncourse.torch`` keep identical public names and signatures; each raises
NotImplementedError pointing to the framework modules that can train.
"""

__all__ = [
    "build_seq2seq",
    "greedy_translate",
    "sequence_accuracy",
    "teacher_forced_predict",
    "train_and_evaluate",
    "train_seq2seq",
]

_MESSAGE = "training needs autograd: use attncourse.tf or attncourse.torch"


def _refuse(name):
    raise NotImplementedError(f"attncourse.numpy.{name}: {_MESSAGE}")


def build_seq2seq(task, attention, embed_dim, hidden_dim):
    """Not available in NumPy (see attncourse.tf / attncourse.torch)."""
    _refuse("build_seq2seq")


def train_seq2seq(encoder, decoder, task, steps, batch_size, learning_rate,
                  clip_norm=1.0, seed=0, desc=None):
    """Not available in NumPy (see attncourse.tf / attncourse.torch)."""
    _refuse("train_seq2seq")


def teacher_forced_predict(encoder, decoder, task, split="test"):
    """Not available in NumPy (see attncourse.tf / attncourse.torch)."""
    _refuse("teacher_forced_predict")


def greedy_translate(encoder, decoder, task, split="test", max_len=None):
    """Not available in NumPy (see attncourse.tf / attncourse.torch)."""
    _refuse("greedy_translate")


def sequence_accuracy(encoder, decoder, task, split="test"):
    """Not available in NumPy (see attncourse.tf / attncourse.torch)."""
    _refuse("sequence_accuracy")


def train_and_evaluate(task, attention, config, desc=None):
    """Not available in NumPy (see attncourse.tf / attncourse.torch)."""
    _refuse("train_and_evaluate")
