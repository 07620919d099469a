"""Code shared by the attention course's chapters, exercises and tests.

Three parallel modules hold the implementations, with identical names and
signatures so the frameworks can be compared line by line:

* ``attncourse.numpy`` -- the NumPy reference (float64 by default, no autograd);
* ``attncourse.tf`` -- TensorFlow 2 / Keras 3;
* ``attncourse.torch`` -- PyTorch.

Only what a framework alone can do is missing from the others: training
(tf, torch) and the builders of a framework's own layers (``to_keras_mha``,
``to_torch_gru``, ...). ``tests/library/test_api_parity.py`` lists these.
Every layer keeps its parameters in ``layer.params`` (name -> storage, (in,
out) layout); ``get_params`` / ``set_params`` copy them as NumPy arrays.

Conventions used everywhere (see ``attncourse.checks``):

* batch first: ``queries`` (batch, num_queries, d_q), ``keys`` (batch, num_keys, d_k),
  ``values`` (batch, num_keys, d_v);
* row vectors: a linear map is ``x @ W`` with ``W`` of shape (d_in, d_out);
* boolean masks, ``True`` = attend, broadcastable (right-aligned) to the scores'
  shape (batch, num_queries, num_keys); a fully masked row gets all-zero weights.
"""

from attncourse import _quiet  # noqa: F401  (sets TF log env vars before any TF import)
from attncourse.seed import set_seed

__all__ = ["set_seed"]
__version__ = "0.1.0"
