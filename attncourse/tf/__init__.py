"""attncourse.tf -- the TensorFlow 2 / Keras 3 implementations.

Functions take and return tf tensors (differentiable with tf.GradientTape);
the layers are keras.layers.Layer subclasses that can build their parameters
from the first call. Same names and signatures as ``attncourse.numpy``, plus
the Keras-only builders (``to_keras_mha``, ``to_keras_gru``) and training.
See ``attncourse`` for the shape and mask conventions.
"""

import attncourse._quiet  # noqa: F401  (before any TensorFlow import)

from . import (
    decoding,
    efficient,
    layers,
    masking,
    multihead,
    pooling,
    positional,
    scoring,
    seq2seq,
    sparse,
    tiny,
    train,
    transformer,
    weights,
)
from .decoding import *  # noqa: F401,F403
from .efficient import *  # noqa: F401,F403
from .layers import *  # noqa: F401,F403
from .masking import *  # noqa: F401,F403
from .multihead import *  # noqa: F401,F403
from .pooling import *  # noqa: F401,F403
from .positional import *  # noqa: F401,F403
from .scoring import *  # noqa: F401,F403
from .seq2seq import *  # noqa: F401,F403
from .sparse import *  # noqa: F401,F403
from .tiny import *  # noqa: F401,F403
from .train import *  # noqa: F401,F403
from .transformer import *  # noqa: F401,F403
from .weights import *  # noqa: F401,F403

__all__ = sorted(
    set().union(
        *(
            m.__all__
            for m in (
                masking,
                scoring,
                pooling,
                layers,
                multihead,
                positional,
                seq2seq,
                transformer,
                tiny,
                decoding,
                efficient,
                sparse,
                train,
                weights,
            )
        )
    )
)
