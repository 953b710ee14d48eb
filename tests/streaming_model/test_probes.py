"""The probes read rendered ground truth correctly, also JPEG-coded, in today's world and under any scene:
they are the eyes of every quality test."""

from __future__ import annotations

import collections
import io
import warnings

import numpy as np
import pytest
from PIL import Image

from streaming_model.manifest import ACTION_NAMES
from streaming_model.probes import _slice, action_shown, identify, measure, motion_energy
from streaming_model.world.episodes import Episode, random_episode


@pytest.fixture(scope="module", params=[False, True], ids=["today", "scene"])
def episode(request: pytest.FixtureRequest) -> Episode:
    """Random worlds, in today's world and in a changing scene (light, weather, door, ball)."""
    return random_episode(11, 12, 48, scene=request.param)


@pytest.fixture(scope="module")
def measures(episode: Episode) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [measure(episode.frames[i], int(episode.identity[i])) for i in range(len(episode.identity))]


def test_position_is_read_within_four_pixels(episode: Episode, measures: list) -> None:
    for i, m in enumerate(measures):
        assert np.nanmax(np.abs(m.x - episode.truth["x"][i])) < 4.0


def test_facing_sign_is_read_when_the_character_is_turned(episode: Episode, measures: list) -> None:
    f = np.concatenate([episode.truth["facing"][i] for i in range(len(measures))])
    got = np.concatenate([m.facing for m in measures])
    turned = np.abs(f) > 0.5
    assert (np.sign(got[turned]) == np.sign(f[turned])).mean() == 1.0


def test_raised_paws_are_read_on_the_right_side(episode: Episode, measures: list) -> None:
    for side in ("l", "r"):
        truth = np.concatenate([episode.truth[f"paw_{side}"][i] for i in range(len(measures))])
        got = np.concatenate([getattr(m, "paw_left" if side == "l" else "paw_right") for m in measures])
        clear = (truth > 0.7) | (truth < 0.3)  # mid-raise frames are ambiguous by nature
        assert ((truth > 0.5) == got)[clear].mean() == 1.0


def test_mouth_openness_follows_the_truth(episode: Episode, measures: list) -> None:
    # A surprised face opens the mouth a little (2 of the 5 pixels of a fully open mouth).
    truth = np.concatenate(
        [episode.truth["mouth"][i] + 0.4 * episode.truth["surprise"][i] for i in range(12)]
    )
    got = np.concatenate([m.mouth for m in measures])
    assert np.corrcoef(truth, got)[0, 1] > 0.98


def test_sitting_and_jumping_are_read(episode: Episode, measures: list) -> None:
    sit = np.concatenate([episode.truth["sit"][i] for i in range(len(measures))])
    jump = np.concatenate([episode.truth["jump_y"][i] for i in range(len(measures))])
    got_sit = np.concatenate([m.sitting for m in measures])
    got_jump = np.concatenate([m.jumping for m in measures])
    clear_sit = ((sit > 0.8) | (sit < 0.2)) & (jump < 1)
    assert ((sit > 0.5) == got_sit)[clear_sit].mean() == 1.0
    clear_jump = (jump > 5) | (jump < 3)
    assert ((jump > 4) == got_jump)[clear_jump].mean() == 1.0


def test_identity_is_recognised_and_its_colour_matches(episode: Episode, measures: list) -> None:
    for i, m in enumerate(measures):
        assert (identify(episode.frames[i]) == episode.identity[i]).all()
        assert np.nanmax(m.identity_dist) < 5.0


def test_every_action_is_recognised_from_truth_frames() -> None:
    ep = random_episode(5, 20, 48)
    verdicts = collections.defaultdict(list)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(len(ep.identity)):
            m = measure(ep.frames[i], int(ep.identity[i]))
            a = ep.codes.action[i]
            starts = [0, *(np.flatnonzero(np.diff(a)) + 1)]
            for s, e in zip(starts, [*starts[1:], len(a)], strict=True):
                if e - s >= 3:
                    name = ACTION_NAMES[a[s]]
                    side = {-1.0: "left", 0.0: "other", 1.0: "right"}[float(ep.codes.side[i, s])]
                    paw = "left" if side == "left" else "right"
                    turn_side = side if name == "turn" else "other"
                    ok = action_shown(
                        name, _slice(m, slice(4 * s, 4 * e)), paw, float(ep.codes.target[i, s, 0]), turn_side
                    )
                    verdicts[name].append(ok)
    assert set(verdicts) == set(ACTION_NAMES)
    for name, v in verdicts.items():
        assert np.mean(v) == 1.0, f"{name}: {np.mean(v):.2f} of {len(v)} segments"


def test_motion_energy_is_zero_for_still_frames_and_positive_for_walking() -> None:
    ep = random_episode(2, 1, 2)
    still = np.repeat(ep.frames[0, :1], 4, axis=0)
    assert motion_energy(still).max() == 0.0
    assert motion_energy(ep.frames[0]).shape == (7,)


def test_the_probes_read_frames_as_a_client_receives_them_jpeg_coded(episode: Episode) -> None:
    # The server sends JPEG (quality 85, 4:2:0 chroma): edges bleed, colours shift a little.
    def jpeg(frame: np.ndarray) -> np.ndarray:
        buf = io.BytesIO()
        Image.fromarray(frame).save(buf, format="JPEG", quality=85)
        return np.asarray(Image.open(buf).convert("RGB"))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(4):
            ident = int(episode.identity[i])
            coded = np.stack([jpeg(f) for f in episode.frames[i]])
            got, raw = measure(coded, ident), measure(episode.frames[i], ident)
            assert np.nanmax(np.abs(got.x - raw.x)) < 3.0
            for name in ("jumping", "sitting", "paw_left", "paw_right"):
                assert (getattr(got, name) == getattr(raw, name)).mean() > 0.95, name
            if np.std(episode.truth["mouth"][i]) > 0.05:
                assert np.corrcoef(np.nan_to_num(got.mouth), episode.truth["mouth"][i])[0, 1] > 0.8
