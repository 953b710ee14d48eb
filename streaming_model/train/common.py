"""Shared training plumbing: atomic checkpoints, progress lines with ETA, a timing log."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from ..precision import compute_dtype


def add_device_args(ap: argparse.ArgumentParser, workers: bool = True) -> None:
    """--device (where the model trains) and --workers (processes that render the worlds beside it)."""
    ap.add_argument("--device", default="cpu", help="torch device to train on (cpu, cuda)")
    if workers:
        ap.add_argument(
            "--workers",
            type=int,
            default=0,
            help="background processes rendering worlds (0: render in this one)",
        )


def bf16(device: torch.device) -> bool:
    """Whether training computes in bf16 there: on a GPU, and on a CPU that computes it natively (elsewhere
    bf16 is emulated: a transformer step at batch 4 took 58 s on an AVX2-only CPU, against under 1 s with
    AMX, so fp32 is used, as the runtime does: ``precision.compute_dtype``)."""
    return device.type != "cpu" or compute_dtype() == torch.bfloat16


def autocast(device: torch.device) -> torch.autocast:
    """bf16 autocast on the device the model trains on, where it computes bf16 (``bf16``)."""
    return torch.autocast(device.type, torch.bfloat16, enabled=bf16(device))


def hardware(device: torch.device) -> str:
    """What trained it, for the exported weights' info."""
    mode = "bf16 autocast" if bf16(device) else "fp32"
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, {mode}"
    return f"{torch.get_num_threads()} CPU threads, {mode}, niced under other work"


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write atomically (tmp + rename) so a kill mid-write never leaves a broken checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict[str, Any] | None:
    """The checkpoint at path, or None when training starts fresh."""
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)


class Progress:
    """Prints steps/s, loss and ETA; appends a JSON line per report to a log file."""

    def __init__(self, log_path: Path, total_steps: int, start_step: int, elapsed_before: float) -> None:
        self.log_path = log_path
        self.total = total_steps
        self.t0 = time.time()
        self.step0 = start_step
        self.elapsed_before = elapsed_before
        self.last_t = self.t0
        self.last_step = start_step

    def elapsed(self) -> float:
        """Training seconds over all runs (resumes included)."""
        return self.elapsed_before + time.time() - self.t0

    def report(self, step: int, **metrics: float) -> None:
        """Log one line: rate since the last report, ETA to total_steps, the given metrics."""
        now = time.time()
        rate = (step - self.last_step) / max(now - self.last_t, 1e-9)
        eta_min = (self.total - step) / max(rate, 1e-9) / 60.0
        self.last_t, self.last_step = now, step
        rec: dict[str, object] = {"step": step, "steps_per_s": round(rate, 3), "eta_min": round(eta_min, 1)}
        rec["elapsed_min"] = round(self.elapsed() / 60.0, 2)
        rec.update({k: round(float(v), 5) for k, v in metrics.items()})
        rec["utc"] = time.strftime("%H:%M:%S", time.gmtime(now))
        line = json.dumps(rec)
        print(line, flush=True)
        with self.log_path.open("a") as fh:
            fh.write(line + "\n")
