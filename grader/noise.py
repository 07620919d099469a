"""Framework log noise on stderr that must not cost a student points.

nbgrader gives a test cell 0 points for ANY stderr output. attncourse already
silences TensorFlow's C++ start-up logging (TF_CPP_MIN_LOG_LEVEL), but Python
warnings (``UserWarning`` from Keras or PyTorch, ``DeprecationWarning``, NumPy
``RuntimeWarning``), TF/absl/XLA log lines and PyTorch's C++ warnings can still
appear -- for example the first time a student's correct layer runs inside a
test cell. nbgrader's ``IgnorePattern`` preprocessor (enabled in
nbgrader_config.py) drops every stderr output of a graded cell that matches
``STDERR_NOISE``, so only real errors (exceptions) decide the grade.

(TensorFlow's Python deprecation messages, "WARNING:tensorflow:...", go to stdout
inside a Jupyter kernel and cost nothing; the pattern covers them anyway.)

Note: IgnorePattern drops a whole stderr output chunk when the pattern is found
anywhere in it; exceptions are not stderr (they are "error" outputs) and are
never dropped.
"""

import re

_LINES = (
    # Python's warnings module: "path/file.py:12: UserWarning: message"
    r"^[^\n]*:\d+: \w*Warning: ",
    # absl/glog C++ logs (TensorFlow, XLA, oneDNN): "I0000 00:00:17.1 123 file.cc:45]"
    r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\] ",
    # TensorFlow's own C++ log format: "2026-01-01 12:00:00.000000: W tensorflow/..."
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] ",
    r"^WARNING: All log messages before absl::InitializeLog\(\) is called",
    # Python logging of TensorFlow / absl / Keras: "WARNING:tensorflow:..."
    r"^(?:DEBUG|INFO|WARNING|ERROR):(?:tensorflow|absl|keras|jax|h5py)",
    # PyTorch C++ warnings: "[W1129 12:00:00.000000000 file.cpp:45] Warning: ..."
    r"^\[[IWE]\d{4} [\d:.]+ [^\]]*\] ",
    r"^To enable the following instructions: .* rebuild TensorFlow",
)

STDERR_NOISE = "(?m)" + "|".join(f"(?:{p})" for p in _LINES)


def is_noise(text: str) -> bool:
    """True if IgnorePattern would drop a stderr output with this text."""
    return re.search(STDERR_NOISE, text) is not None
