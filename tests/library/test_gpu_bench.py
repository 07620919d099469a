"""`make bench-gpu` without CUDA: a clear skip, exit status 0, nothing written.

The GPU path itself (timing with CUDA events, the table) runs only on a GPU
machine; here the skip path and the pieces that need no device are checked.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_attention.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present")
def test_without_cuda_it_skips_with_a_reason_and_exit_0(tmp_path):
    out = tmp_path / "bench" / "gpu_attention.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "bench-gpu: skipped" in done.stdout and "CUDA" in done.stdout
    assert not out.parent.exists()


def test_flop_count_follows_flashattention2():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu_attention as bench
    finally:
        sys.path.remove(str(SCRIPT.parent))
    full = bench.flops(1024, 64, causal=False, pass_="forward")
    assert full == 4 * bench.BATCH * bench.HEADS * 1024**2 * 64
    assert bench.flops(1024, 64, causal=True, pass_="forward") == full / 2
    assert bench.flops(1024, 64, causal=False, pass_="forward+backward") == 3.5 * full
