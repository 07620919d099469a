"""Silence framework start-up noise before TensorFlow is imported.

TensorFlow writes C++ log lines to stderr at import (oneDNN notices, CPU feature
hints). In a book they clutter outputs; under nbgrader any stderr in a test cell
costs the student the cell's points. ``TF_ENABLE_ONEDNN_OPTS=0`` also makes TF's
float32 kernels agree more closely with NumPy and PyTorch.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

# Triton (installed on Linux x86_64 for the attention-kernel chapter) and
# TensorFlow each bundle LLVM: whichever loads second aborts the process
# ("Option ... registered more than once"). PyTorch imports triton lazily (any
# use of torch._dynamo), long after TensorFlow, so it is loaded here, first.
try:
    import triton  # noqa: F401
except ImportError:
    pass
