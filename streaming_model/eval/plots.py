"""The report's PNG plots (matplotlib figures drawn straight to files, no pyplot and no display): per-metric
distributions side by side, and the long session's drift window by window."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ..manifest import FPS, FRAMES_PER_CHUNK
from .drift import WINDOW
from .runner import SeedScores
from .verdict import Comparison

COLOURS = ("#4c72b0", "#dd8452")  # baseline, candidate
_COLUMNS = 5


def distributions(
    comparisons: Sequence[Comparison],
    scores: tuple[Sequence[SeedScores], Sequence[SeedScores]],
    labels: tuple[str, str],
    path: Path,
) -> None:
    """One panel per metric: every seed's value for each configuration, the same seed joined by a line,
    the means as bars; the panel's title says the verdict (red where it differs)."""
    rows = -(-len(comparisons) // _COLUMNS)
    fig = Figure(figsize=(2.7 * _COLUMNS, 2.5 * rows))
    axes = fig.subplots(rows, _COLUMNS, squeeze=False)
    jitter = np.random.default_rng(0).uniform(-0.12, 0.12, len(scores[0]))  # fixed: plots are repeatable
    for ax, comp in zip(axes.flat, comparisons, strict=False):
        per_config = [np.array([_num(s.metrics.get(comp.metric)) for s in side]) for side in scores]
        for seed in range(len(jitter)):
            ax.plot([jitter[seed], 1 + jitter[seed]], [v[seed] for v in per_config], color="#bbb", lw=0.6)
        for x, (values, colour) in enumerate(zip(per_config, COLOURS, strict=True)):
            ax.scatter(x + jitter, values, s=14, color=colour, zorder=3)
            if np.isfinite(values).any():
                ax.hlines(np.nanmean(values), x - 0.3, x + 0.3, color=colour, lw=2.5, zorder=4)
        ax.set_xticks([0, 1], ["baseline", "candidate"])
        ax.set_xlim(-0.5, 1.5)
        differs = comp.verdict == "differs"
        ax.set_title(
            f"{comp.metric}\n{comp.verdict}",
            fontsize=9,
            color="#c0392b" if differs else "#333",
            fontweight="bold" if differs else "normal",
        )
        ax.tick_params(labelsize=8)
    for ax in axes.flat[len(comparisons) :]:
        ax.axis("off")
    fig.suptitle(f"per seed: baseline ({labels[0]}) against candidate ({labels[1]})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def drift(
    scores: tuple[Sequence[SeedScores], Sequence[SeedScores]], labels: tuple[str, str], path: Path
) -> None:
    """Identity distance and walking motion per window of the long session: mean over seeds, with a band
    of one between-seed standard deviation."""
    fig = Figure(figsize=(10, 3.6))
    axes = fig.subplots(1, 2)
    panels = (
        ("identity_dist", "identity distance (RGB, lower is better)"),
        ("motion_px", "walking |dx| per frame (px)"),
    )
    for ax, (field, title) in zip(axes, panels, strict=True):
        for side, label, colour in zip(scores, ("baseline", "candidate"), COLOURS, strict=True):
            windows = np.array(
                [[_num(v) for v in getattr(s.drift, field)] for s in side if s.drift is not None]
            )
            if not windows.size:
                continue
            t = (np.arange(windows.shape[1]) + 1) * WINDOW * FRAMES_PER_CHUNK / FPS
            mean, std = np.nanmean(windows, 0), np.nanstd(windows, 0)
            ax.plot(t, mean, marker="o", color=colour, label=label)
            ax.fill_between(t, mean - std, mean + std, color=colour, alpha=0.2)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("session time at the window's end (s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"long session: baseline ({labels[0]}) against candidate ({labels[1]})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def _num(value: float | None) -> float:
    return np.nan if value is None else value
