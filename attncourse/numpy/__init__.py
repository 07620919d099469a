"""attncourse.numpy -- the NumPy reference implementations.

float64 by default, no autograd: the float64 ``expected`` values of the
graded exercises and the tests' reference outputs come from here. It holds
the layers and functions that need no gradients; training lives in
``attncourse.tf`` and ``attncourse.torch`` only. Its siblings use the same
names and signatures; see ``attncourse`` for the shape and mask conventions.
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
                weights,
            )
        )
    )
)
