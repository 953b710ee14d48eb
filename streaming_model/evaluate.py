"""Measure whether generated frames follow their conditions, with the probes.

    python -m streaming_model.evaluate --seeds 20 [--world] [--compare-naive]

Per seed (= session seed and identity), every action is held for 4 chunks after 2 idle chunks, in
one continuous session, in the manifest's order (turn as a turn around, from facing right after
walk_right) or, with ``order="shuffled"`` (``onstage eval``'s default), in an order drawn from the seed,
so that over seeds each action is held after many of the others; then three turns
to random named sides ("turn_side": ending on that side, which a model that always turns around fails
when it already faces it; "turn_side_away": only the turns that started facing the other way, which a
model that does not turn fails); a talking segment checks that the mouth follows the audio envelope.
--world runs the same script through the procedural world (the probes' ceiling, ~100%).
--scene evaluates the scene instead (``scene_evaluate``): every choice of every part and every action
toward the scene, for the world or for a model whose weights read the scene (``--weights``).
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from .codec import Codec, chunk_voices, to_pixels, to_uint8
from .condition import SIDE_SIGN, ChunkCondition, ConditionError
from .kv_cache import CacheMode
from .linears import LinearsChoice
from .loading import DEFAULT_CODEC_PATH, DIT_PATH, load_codec
from .manifest import ACTION_NAMES, FRAMES_PER_CHUNK
from .passes import CommitPass
from .precision import computing
from .probes import _slice, action_shown, measure
from .render import world_frames
from .runtime import Generator
from .sampler import STEPS
from .scene_evaluate import model_draw, run_scene
from .world.palette import NUM_IDENTITIES

LEAD, HOLD, TALK = 2, 4, 8  # chunks
SIDE_TURNS = 3
Order = Literal["fixed", "shuffled"]  # the held actions as given, or in an order drawn from the seed


@dataclass
class SeedResult:
    """Probe verdicts of one seed."""

    actions: dict[str, float] = field(default_factory=dict)  # share of an action's segments shown
    order: list[str] = field(default_factory=list)  # the held actions in the order the script held them
    turns_away: list[bool] = field(default_factory=list)  # side turns that had to change the facing
    mouth_r: float = float("nan")
    identity_dist: float = float("nan")
    motion_end: float = float("nan")  # mean |dx| per chunk during the last walk: does it still move?


def script(
    seed: int, actions: Sequence[str] = ACTION_NAMES, side_turns: int = SIDE_TURNS, order: Order = "fixed"
) -> tuple[list[ChunkCondition], list[tuple[str, int, dict]]]:
    """Conditions and, per action, (name, first chunk, params) of its segment (every action and
    ``SIDE_TURNS`` side turns unless fewer are asked for: a shortened script for quick checks), the
    actions in the order given or shuffled by the seed."""
    rng = np.random.default_rng(seed)
    if order == "shuffled":
        actions = [actions[i] for i in rng.permutation(len(actions))]
    conds: list[ChunkCondition] = []
    segments: list[tuple[str, int, dict]] = []
    for name in actions:
        conds += [ChunkCondition("idle")] * LEAD
        paw, target = str(rng.choice(["left", "right"])), (float(rng.choice([-0.9, 0.9])), 0.0)
        segments.append((name, len(conds), {"paw": paw, "target": target}))
        conds += [ChunkCondition(name, target=target, paw=paw)] * HOLD
    for _ in range(side_turns):
        conds += [ChunkCondition("idle")] * LEAD
        side = str(rng.choice(["left", "right"]))
        segments.append(("turn_side", len(conds), {"side": side}))
        conds += [ChunkCondition("turn", side=side)] * HOLD
    env = rng.uniform(0.0, 1.0, TALK * FRAMES_PER_CHUNK)
    env[rng.random(env.shape) < 0.3] = 0.0
    segments.append(("talk", len(conds), {"audio": env}))
    for i in range(TALK):
        conds.append(
            ChunkCondition("idle", speaking=True, audio=tuple(float(a) for a in env[4 * i : 4 * i + 4]))
        )
    segments.append(("walk_end", len(conds), {}))
    conds += [ChunkCondition("walk_right")] * 3
    return conds, segments


def score(frames: np.ndarray, identity: int, segments: list[tuple[str, int, dict]]) -> SeedResult:
    """Probe verdicts for one seed's frames (all chunks concatenated)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = measure(frames, identity)
        res = SeedResult()
        side_turns = []
        for name, start, params in segments:
            f0 = start * FRAMES_PER_CHUNK
            if name == "talk":
                n = len(params["audio"])
                mouth = m.mouth[f0 : f0 + n]
                res.mouth_r = float(np.corrcoef(params["audio"], np.nan_to_num(mouth))[0, 1])
            elif name == "walk_end":
                res.motion_end = float(np.nanmean(np.abs(np.diff(m.x[f0:]))))
            elif name == "turn_side":
                seg = _slice(m, slice(f0, f0 + HOLD * FRAMES_PER_CHUNK))
                shown = action_shown("turn", seg, side=params["side"])
                side_turns.append(shown)
                before = float(np.nanmean(m.facing[f0 - 2 : f0]))
                if before * SIDE_SIGN[params["side"]] < 0:
                    res.turns_away.append(shown)
            else:
                seg = _slice(m, slice(f0, f0 + HOLD * FRAMES_PER_CHUNK))
                res.actions[name] = action_shown(name, seg, params["paw"], params["target"][0])
                res.order.append(name)
        if side_turns:
            res.actions["turn_side"] = float(np.mean(side_turns))
        res.identity_dist = float(np.nanmedian(m.identity_dist))
    return res


def run_model(
    gen: Generator,
    seed: int,
    cache_mode: CacheMode = "write_time",
    steps: int = STEPS,
    *,
    cache_noise: float = 0.0,
    linears: LinearsChoice = "float",
    commit_pass: CommitPass = "fused",
    actions: Sequence[str] = ACTION_NAMES,
    side_turns: int = SIDE_TURNS,
    order: Order = "fixed",
) -> SeedResult:
    """Generate one seed's script (shortened with ``actions`` and ``side_turns``, in ``order``) with a
    model and score it; ``cache_noise``, ``linears`` and ``commit_pass`` as in ``Generator.open_session``."""
    identity = seed % NUM_IDENTITIES
    conds, segments = script(seed, actions, side_turns, order)
    session = gen.open_session(
        identity=identity,
        seed=seed,
        steps=steps,
        cache_mode=cache_mode,
        cache_noise=cache_noise,
        linears=linears,
        commit_pass=commit_pass,
    )
    frames = np.concatenate([session.step(c) for c in conds])
    return score(frames, identity, segments)


def run_world(seed: int, codec: Codec | None = None) -> SeedResult:
    """The same script through the procedural world (and through the codec, when given: the ceiling
    of what a model decoded by that codec can score)."""
    identity = seed % NUM_IDENTITIES
    conds, segments = script(seed)
    draw = world_draw if codec is None else codec_draw(codec)
    return score(draw(conds, identity, seed), identity, segments)


def world_draw(conds: list[ChunkCondition], identity: int, seed: int) -> np.ndarray:
    """The procedural world's frames for a script (the seed changes nothing there)."""
    return world_frames(conds, identity)


def codec_draw(codec: Codec) -> Callable[[list[ChunkCondition], int, int], np.ndarray]:
    """The world's frames for a script encoded and decoded by ``codec`` (with the script's voice): the
    ceiling of what a model decoded by that codec can score."""

    def draw(conds: list[ChunkCondition], identity: int, seed: int) -> np.ndarray:
        frames = world_frames(conds, identity)
        chunks = torch.from_numpy(frames.reshape(-1, FRAMES_PER_CHUNK, *frames.shape[1:]))
        voice = torch.tensor([c.voice for c in conds]).reshape(1, -1)
        per_chunk = chunk_voices(voice, codec.cfg.voice_taps)[0]
        out = []
        with computing():
            for i in range(0, len(chunks), 64):  # a long script at once would hold gigabytes
                rec = codec.decode(codec.encode(to_pixels(chunks[i : i + 64])), per_chunk[i : i + 64])
                out.append(to_uint8(rec.float()).numpy())
        return np.concatenate(out).reshape(frames.shape)

    return draw


def summarise(results: list[SeedResult]) -> dict[str, float]:
    """Per-action accuracy, mean mouth r, identity distance, end motion."""
    out = {name: float(np.mean([r.actions[name] for r in results])) for name in results[0].actions}
    away = [shown for r in results for shown in r.turns_away]
    out["turn_side_away"] = float(np.mean(away)) if away else float("nan")
    out["turn_side_away_n"] = float(len(away))
    out["mouth_r"] = float(np.nanmean([r.mouth_r for r in results]))
    out["identity_dist"] = float(np.nanmean([r.identity_dist for r in results]))
    out["motion_end_px"] = float(np.nanmean([r.motion_end for r in results]))
    return out


def long_run(gen: Generator, chunks: int, seed: int = 0) -> dict[str, float]:
    """A long session of cycling actions: identity colour distance early vs late, and whether the
    character still walks when told to at the end (drift and freezing)."""
    identity = seed % NUM_IDENTITIES
    session = gen.open_session(identity=identity, seed=seed)
    dists = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(chunks):
            action = ACTION_NAMES[(i // 6) % len(ACTION_NAMES)]
            frames = session.step(ChunkCondition(action, target=(0.5, 0.0)))
            if i % 50 == 0:
                dists.append(float(np.nanmedian(measure(frames, identity).identity_dist)))
        end = [session.step(ChunkCondition("walk_left" if i < 4 else "walk_right")) for i in range(8)]
        m = measure(np.concatenate(end), identity)
    return {
        "identity_dist_first": dists[0],
        "identity_dist_last": dists[-1],
        "identity_dist_max": max(dists),
        "end_walk_left_px": float(m.x[15] - m.x[0]),
        "end_walk_right_px": float(m.x[31] - m.x[16]),
    }


def main() -> None:
    """Print per-action accuracy over seeds (and naive vs write-time agreement with --compare-naive)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument(
        "--steps",
        type=int,
        default=2,
        help="denoise steps (default 2, as this script's figures in BENCHMARKS.md were measured, the scene's "
        "included; sessions run 1: `onstage eval` compares configurations as served)",
    )
    ap.add_argument("--world", action="store_true")
    ap.add_argument("--codec", action="store_true", help="with --world: through the codec (--codec-weights)")
    ap.add_argument("--compare-naive", action="store_true")
    ap.add_argument("--long", type=int, default=0, help="also run one session of this many chunks")
    ap.add_argument("--scene", action="store_true", help="the scene's choices and actions (scene_evaluate)")
    ap.add_argument("--weights", type=Path, default=DIT_PATH, help="the transformer's weights")
    ap.add_argument(
        "--codec-weights",
        type=Path,
        default=DEFAULT_CODEC_PATH,
        help="the codec's weights (default: as served)",
    )
    args = ap.parse_args()
    seeds = range(args.seeds)
    if args.scene:
        if args.world:
            draw = codec_draw(load_codec(args.codec_weights)) if args.codec else world_draw
        else:
            draw = model_draw(Generator.load(args.weights, args.codec_weights), args.steps)
        try:
            figures = run_scene(draw, seeds)
        except ConditionError as exc:
            raise SystemExit(
                f"evaluate --scene: {exc} (give --weights of a transformer trained on it)"
            ) from None
        print(
            "scene" + " world" * args.world + " codec" * args.codec,
            " ".join(f"{k}={v:.3f}" for k, v in figures.items()),
        )
        return
    codec = load_codec(args.codec_weights) if args.codec else None
    runs = {"world" + "+codec" * args.codec: [run_world(s, codec) for s in seeds]} if args.world else {}
    if not args.world:
        gen = Generator.load(args.weights, args.codec_weights)
        runs["write_time"] = [run_model(gen, s, "write_time", args.steps) for s in seeds]
        if args.compare_naive:
            runs["naive"] = [run_model(gen, s, "naive", args.steps) for s in seeds]
    for name, res in runs.items():
        summ = summarise(res)
        print(name, " ".join(f"{k}={v:.3f}" for k, v in summ.items()))
    if args.long:
        print("long run", long_run(Generator.load(), args.long))
    if "naive" in runs:
        for metric in ("mouth_r", "identity_dist"):
            a = np.array([getattr(r, metric) for r in runs["write_time"]])
            b = np.array([getattr(r, metric) for r in runs["naive"]])
            print(
                f"{metric}: mean diff {np.nanmean(a) - np.nanmean(b):+.4f}, seed spread (std) {np.nanstd(a):.4f}"
            )


if __name__ == "__main__":
    main()
