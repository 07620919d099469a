"""What a sandboxed kernel reports to the grader, and how.

In sandboxed grading a hidden test does not judge anything: ``check(...)``
runs the student's code on the inputs (``observe``) and *publishes* the
results as a display output of the hidden test cell, with a MIME type of our
own. The grader (``grader.verdicts``) reads these outputs from the
executed notebook, judges them with reference outputs the kernel never had,
and removes them before the notebook is saved. The kernel needs no writable
folder on the host for this, and each result is tied to the cell that made it.

Payloads are JSON; arrays travel as base64 ``.npz`` (plain NumPy, loaded with
``allow_pickle=False``). The integrity probe (``grader.kernel.probe``)
reports through the same channel after every cell.
"""

import base64
import io
import json

import numpy as np

OBSERVATION = "application/vnd.attncourse.observation+json"
INTEGRITY = "application/vnd.attncourse.integrity+json"
OURS = (OBSERVATION, INTEGRITY)
MAX_PAYLOAD = 8 * 1024 * 1024  # characters; larger payloads are rejected
VERSION = 1


def encode_arrays(arrays: dict) -> str:
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def decode_arrays(text: str) -> dict:
    raw = base64.b64decode(text.encode("ascii"), validate=True)
    with np.load(io.BytesIO(raw), allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def observation_payload(assignment, check, framework, observed: dict,
                        error: dict | None = None) -> dict:
    """``observed``: {case: {key: array or None}} in case order."""
    cases = []
    for case, results in observed.items():
        present = {k: v for k, v in results.items() if v is not None}
        cases.append({"case": case, "arrays": encode_arrays(present),
                      "missing": sorted(k for k, v in results.items() if v is None)})
    return {"v": VERSION, "assignment": assignment, "check": check,
            "framework": framework, "cases": cases, "error": error}


def parse_observation(payload) -> dict:
    """{"key": (assignment, check, framework), "observed": {case: results},
    "error": {"case", "message"} | None}; raises ValueError if malformed."""
    if isinstance(payload, str):
        if len(payload) > MAX_PAYLOAD:
            raise ValueError("observation too large")
        payload = json.loads(payload)
    if not isinstance(payload, dict) or payload.get("v") != VERSION:
        raise ValueError("unknown observation format")
    key = tuple(str(payload[k]) for k in ("assignment", "check", "framework"))
    observed = {}
    for entry in payload.get("cases") or []:
        arrays = decode_arrays(entry["arrays"])
        for k, v in arrays.items():
            if v.dtype.kind not in "biuf":
                raise ValueError(f"{k}: dtype {v.dtype} is not numeric")
        arrays.update(dict.fromkeys(entry.get("missing") or []))
        observed[str(entry["case"])] = arrays
    error = payload.get("error")
    if error is not None:
        error = {"case": str(error.get("case")), "message": str(error.get("message"))}
    return {"key": key, "observed": observed, "error": error}


def ours(output) -> str | None:
    """The MIME type if ``output`` (a notebook output) is one of our reports."""
    data = output.get("data") if output.get("output_type") in (
        "display_data", "execute_result") else None
    if not data:
        return None
    return next((m for m in OURS if m in data), None)


def payloads(cell, mime) -> list:
    found = []
    for output in cell.get("outputs", []):
        data = output.get("data") or {}
        if output.get("output_type") in ("display_data", "execute_result") \
                and mime in data:
            found.append(data[mime])
    return found
