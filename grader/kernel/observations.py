"""What a sandboxed kernel reports to the grader, and how.

In sandboxed grading a hidden test does not judge anything: ``check(...)``
runs the student's code on the inputs (``observe``) and *publishes* the
results as a display output of the hidden test cell, with a MIME type of our
own. The grader (``grader.verdicts``) reads these outputs from the
executed notebook, judges them with reference outputs the kernel never had,
and removes them before the notebook is saved. The kernel needs no writable
folder on the host for this, and each result is tied to the cell that made it.

Payloads are JSON strings; arrays travel as base64 ``.npz`` (plain NumPy,
loaded with ``allow_pickle=False``). The integrity probe
(``grader.kernel.probe``) reports through the same channel after every cell.

The decode side runs in the grader on what a hostile kernel sent, so it is
bounded before anything is inflated: a payload of at most ``MAX_PAYLOAD``
characters, whatever its form; at most ``MAX_MEMBERS`` arrays per ``.npz``;
each array's size as its ``.npy`` header declares it (read from the zip
without decompressing the data) no larger than the zip entry says and, over
one payload, at most ``MAX_DECODED`` bytes; numeric dtypes only.
"""

import base64
import io
import json
import math
import zipfile

import numpy as np

OBSERVATION = "application/vnd.attncourse.observation+json"
INTEGRITY = "application/vnd.attncourse.integrity+json"
OURS = (OBSERVATION, INTEGRITY)
MAX_PAYLOAD = 8 * 1024 * 1024  # characters; larger payloads are rejected
MAX_DECODED = 8 * 1024 * 1024  # bytes of arrays decoded from one payload
MAX_MEMBERS = 256  # arrays in one .npz
NUMERIC = "biuf"
VERSION = 1


def encode_arrays(arrays: dict) -> str:
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def decode_arrays(text: str, budget: list | None = None) -> dict:
    """The arrays of a base64 ``.npz``; ValueError if malformed or too large.

    ``budget`` (a one-item list of bytes left) is shared by the calls for one
    payload; each array's declared size is checked against it before the array
    is read, so a small zip that would inflate to gigabytes is refused."""
    if not isinstance(text, str) or len(text) > MAX_PAYLOAD:
        raise ValueError("arrays: not a string of at most MAX_PAYLOAD characters")
    budget = [MAX_DECODED] if budget is None else budget
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as exc:
        raise ValueError(f"arrays: not base64 ({exc})") from None
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as zf:
            return _read_members(zf, budget)
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        EOFError,
        OSError,
        NotImplementedError,
        RuntimeError,
    ) as exc:
        raise ValueError(f"arrays: not a valid .npz ({exc})") from None


def _read_members(zf: zipfile.ZipFile, budget: list) -> dict:
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise ValueError(f"arrays: more than {MAX_MEMBERS} arrays")
    if sum(i.file_size for i in infos) > budget[0]:
        raise ValueError("arrays: too large when decompressed")
    arrays = {}
    for info in infos:
        name = info.filename
        if not name.endswith(".npy") or name[:-4] in arrays:
            raise ValueError(f"arrays: unexpected member {name[:80]!r}")
        with zf.open(info) as f:
            shape, dtype = _npy_header(f)
            size = math.prod(shape) * dtype.itemsize
            if size > info.file_size or size > budget[0]:
                raise ValueError(f"{name[:80]}: declares {size} bytes of data")
            budget[0] -= size
        with zf.open(info) as f:
            arrays[name[:-4]] = np.lib.format.read_array(f, allow_pickle=False)
    return arrays


def _npy_header(f):
    """(shape, dtype) of a ``.npy`` stream; ValueError unless numeric."""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
    elif version in ((2, 0), (3, 0)):
        shape, _, dtype = np.lib.format.read_array_header_2_0(f)
    else:
        raise ValueError(f"npy format {version}")
    if dtype.kind not in NUMERIC or dtype.hasobject or dtype.fields:
        raise ValueError(f"dtype {dtype} is not numeric")
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError(f"bad shape {shape}")
    return shape, dtype


def observation_payload(
    assignment, check, framework, observed: dict, error: dict | None = None
) -> dict:
    """``observed``: {case: {key: array or None}} in case order."""
    cases = []
    for case, results in observed.items():
        present = {k: v for k, v in results.items() if v is not None}
        cases.append(
            {
                "case": case,
                "arrays": encode_arrays(present),
                "missing": sorted(k for k, v in results.items() if v is None),
            }
        )
    return {
        "v": VERSION,
        "assignment": assignment,
        "check": check,
        "framework": framework,
        "cases": cases,
        "error": error,
    }


def parse_observation(payload) -> dict:
    """{"key": (assignment, check, framework), "observed": {case: results},
    "error": {"case", "message"} | None}; raises ValueError if malformed."""
    payload = load_payload(payload, "observation")
    if payload.get("v") != VERSION:
        raise ValueError("unknown observation format")
    key = tuple(str(payload[k]) for k in ("assignment", "check", "framework"))
    observed, budget = {}, [MAX_DECODED]
    cases = payload.get("cases") or []
    if not isinstance(cases, list):
        raise ValueError("cases: not a list")
    for entry in cases:
        arrays = decode_arrays(entry["arrays"], budget)
        missing = entry.get("missing") or []
        if not isinstance(missing, list) or len(missing) > MAX_MEMBERS:
            raise ValueError("missing: not a short list")
        arrays.update(dict.fromkeys(str(m) for m in missing))
        observed[str(entry["case"])] = arrays
    error = payload.get("error")
    if error is not None:
        error = {"case": str(error.get("case")), "message": str(error.get("message"))}
    return {"key": key, "observed": observed, "error": error}


def load_payload(payload, what: str = "payload") -> dict:
    """A report's JSON object, from the string our kernel side sends -- or from
    any other form a hostile kernel sends, bounded the same way."""
    if not isinstance(payload, str):
        try:  # a dict (or anything else) is measured as the JSON it would be
            payload = json.dumps(payload)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError(f"{what}: not JSON ({type(exc).__name__})") from None
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"{what} too large")
    try:
        payload = json.loads(payload)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{what}: not JSON ({type(exc).__name__})") from None
    if not isinstance(payload, dict):
        raise ValueError(f"{what}: not a JSON object")
    return payload


def ours(output) -> str | None:
    """The MIME type if ``output`` (a notebook output) is one of our reports."""
    data = (
        output.get("data")
        if output.get("output_type") in ("display_data", "execute_result")
        else None
    )
    if not data:
        return None
    return next((m for m in OURS if m in data), None)


def payloads(cell, mime) -> list:
    found = []
    for output in cell.get("outputs", []):
        data = output.get("data") or {}
        if (
            output.get("output_type") in ("display_data", "execute_result")
            and mime in data
        ):
            found.append(data[mime])
    return found
