"""The real-recording test set: scenes mixed from the clips in tests/data/sounds/, with their ground truth.

The clips (door knocks, hand claps, applause, a doorbell, bells, footsteps, coughs, music, a dog, a crowd,
five speakers, a distant street and a vacuum cleaner's motor as noise) are real recordings cut out of Debian packages by
``scripts/build_sound_set.py``; ``clips.json`` says where each comes from and under which licence. The
scenes are mixed here, in memory and deterministically, so that nothing mixed is stored:

- ``quiet``: every knock, clap, applause, doorbell and distractor alone over a distant street at a quiet
  room's level (-60 dBFS);
- ``speech``: the speakers talking with short pauses, knocks and claps both in the pauses and under the
  speech (``under_speech``), plus applause, bells and music between utterances;
- ``fan``: knocks, claps, the doorbell and some speech in a motor's steady noise at -35 dBFS, a loud fan.

Each ``Truth`` gives a sound's kind, where it starts and ends, and for knocks and claps each impulse.
``write`` puts a scene and its truth on disk (for ``onstage listen``).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import NamedTuple

import msgspec
import numpy as np
from scipy.io import wavfile

RATE = 16_000
CLIPS = Path(__file__).resolve().parents[1] / "data" / "sounds"
GAP_S = 1.6  # quiet between placed sounds: longer than a YAMNet window, so names do not mix
IMPULSIVE = ("knock", "clap")
NAMED = ("knock", "clap", "applause", "doorbell")
"""The kinds that must get their name (the reflexes answer these)."""
EXPECTED: dict[str, frozenset[str]] = {
    "knock": frozenset({"Knock", "Door"}),
    "clap": frozenset({"Clapping", "Applause"}),
    "applause": frozenset({"Applause", "Clapping"}),
    "doorbell": frozenset({"Doorbell"}),
    "music": frozenset({"Music"}),
    "cough": frozenset({"Cough"}),
    "crowd": frozenset({"Applause", "Shout", "Cheering"}),
}
"""Labels that are a right name for each kind; any other label on it is a false name."""


class Truth(msgspec.Struct, frozen=True, kw_only=True):
    """One sound placed in a scene."""

    kind: str
    clip: str
    start_ms: float
    end_ms: float
    impulses_ms: tuple[float, ...] = ()
    """Where each knock or clap of a train starts (its first sample above the noise)."""
    under_speech: bool = False


class Scene(NamedTuple):
    name: str
    audio: np.ndarray
    truth: list[Truth]


@cache
def clip(name: str) -> np.ndarray:
    """A committed clip as float32 samples (peak at -1 dBFS)."""
    rate, data = wavfile.read(CLIPS / f"{name}.wav")
    assert rate == RATE, name
    return data.astype(np.float32) / 32768.0


def catalogue() -> list[dict[str, object]]:
    """clips.json: each clip's kind, package, source, licence."""
    records: list[dict[str, object]] = json.loads((CLIPS / "clips.json").read_text())
    return records


def kinds() -> dict[str, str]:
    """Clip name -> kind."""
    return {str(r["name"]): str(r["kind"]) for r in catalogue()}


def attack(audio: np.ndarray, below_peak_db: float = 20.0) -> int:
    """The first sample of a sound: where it first comes within ``below_peak_db`` of its peak."""
    env = np.abs(audio)
    return int(np.argmax(env >= 10 ** (-below_peak_db / 20) * env.max()))


def at_peak(name: str, peak_db: float) -> np.ndarray:
    """A committed clip scaled to a peak of ``peak_db`` dBFS."""
    return clip(name) * (10 ** (peak_db / 20) / 10 ** (-1 / 20))


def start(audio: np.ndarray, kind: str) -> int:
    """Where a sound of ``kind`` starts: an impulse (knock, clap) at its rise, any other sound where it
    first stands out of the noise."""
    return attack(audio, 20.0 if kind in IMPULSIVE else 40.0)


def room(seconds: float, level_db: float, noise: str) -> np.ndarray:
    """A noise clip looped with crossfades to ``seconds``, at an RMS of ``level_db`` dBFS."""
    base = clip(noise)
    fade = base.size // 4
    ramp = np.linspace(0.0, 1.0, fade, dtype=np.float32)
    out = np.zeros(round(seconds * RATE) + base.size, np.float32)
    at = 0
    while at < out.size - base.size:
        piece = base.copy()
        piece[:fade] *= ramp
        piece[-fade:] *= ramp[::-1]
        out[at : at + base.size] += piece
        at += base.size - fade
    out = out[: round(seconds * RATE)]
    return out * (10 ** (level_db / 20) / float(np.sqrt(np.mean(out**2))))


class _Mix:
    """Sounds laid one after another (or over each other) with their truth."""

    def __init__(self) -> None:
        self.parts: list[tuple[int, np.ndarray]] = []
        self.truth: list[Truth] = []
        self.end = round(0.5 * RATE)

    def add(
        self,
        kind: str,
        names: list[str],
        peak_db: float,
        *,
        spacing_s: float = 0.0,
        at: int | None = None,
        under_speech: bool = False,
    ) -> int:
        """Place ``names`` (a train when several, ``spacing_s`` apart) at ``at`` or after the last sound."""
        begin = self.end if at is None else at
        impulses, stop = [], begin
        for i, name in enumerate(names):
            audio = at_peak(name, peak_db)
            pos = begin + round(i * spacing_s * RATE)
            self.parts.append((pos, audio))
            impulses.append((pos + start(audio, kind)) * 1000 / RATE)
            stop = max(stop, pos + audio.size)
        self.truth.append(
            Truth(
                kind=kind,
                clip="+".join(names),
                start_ms=impulses[0],
                end_ms=stop * 1000 / RATE,
                impulses_ms=tuple(impulses) if kind in IMPULSIVE else (),
                under_speech=under_speech,
            )
        )
        if at is None:
            self.end = stop + round(GAP_S * RATE)
        return stop

    def render(self, name: str, noise: str, noise_db: float) -> Scene:
        seconds = self.end / RATE + 0.5
        audio = room(seconds, noise_db, noise)
        for pos, part in self.parts:
            audio[pos : pos + part.size] += part[: audio.size - pos]
        truth = sorted(self.truth, key=lambda t: t.start_ms)
        return Scene(name, np.clip(audio, -1.0, 1.0).astype(np.float32), truth)


KNOCK_TRAINS = [["knock_a", "knock_b"], ["knock_c", "knock_a", "knock_b", "knock_c"]]
CLAPS = ["clap_gimme_softest", "clap_gimme_soft", "clap_gimme_med", "clap_gimme_hard", "clap_gimme_hardest"]
CLAPS += ["clap_millo_1", "clap_millo_3", "clap_pearl"]
SPEECH = [name for name, kind in sorted(kinds().items()) if kind == "speech"]
APPLAUSE = ["applause", "applause_whoop", "applause_ooo", "applause_circus", "applause_gemdrop"]
APPLAUSE += ["applause_bubble"]
VOICED_APPLAUSE = frozenset({"applause", "applause_whoop"})
"""The applause recordings that open with a voice: a shout (~90 ms at 141 Hz), a whoop."""


def _knocks_and_claps(mix: _Mix, peak_db: float) -> None:
    for name in ("knock_a", "knock_b", "knock_c"):
        mix.add("knock", [name], peak_db)
    mix.add("knock", ["knock_train3"], peak_db)
    mix.add("knock", KNOCK_TRAINS[0], peak_db, spacing_s=0.3)
    mix.add("knock", KNOCK_TRAINS[1], peak_db - 4, spacing_s=0.22)
    for name in CLAPS:
        mix.add("clap", [name], peak_db)
    mix.add("clap", ["clap_gimme_med"] * 4, peak_db, spacing_s=0.35)
    mix.add("clap", ["clap_pearl", "clap_gimme_hard", "clap_millo_3"], peak_db - 3, spacing_s=0.5)


def quiet() -> Scene:
    """Every sound alone in a quiet room."""
    mix = _Mix()
    _knocks_and_claps(mix, -8.0)
    for name in APPLAUSE:
        mix.add("applause", [name], -6.0)
    mix.add("doorbell", ["doorbell"], -8.0)
    mix.add("doorbell", ["doorbell"], -18.0)
    for name in ("bell_ring", "bell_gong", "bell_desktop", "bell_cowbell"):
        mix.add("bell", [name], -10.0)
    steps = ["step_wood_1", "step_hard_1", "step_wood_2", "step_hard_2", "step_hard_3", "step_wood_1"]
    mix.add("footsteps", steps, -14.0, spacing_s=0.55)
    for name in ("cough_default", "cough_hillbilly", "cough_default_es"):
        mix.add("cough", [name], -8.0)
    for name in ("dog_bark", "dog_farm"):
        mix.add("dog", [name], -8.0)
    for name in ("music_america", "music_africa"):
        mix.add("music", [name], -8.0)
    mix.add("crowd", ["crowd_cheer"], -8.0)
    return mix.render("quiet", "noise_street", -60.0)


def speech() -> Scene:
    """Five speakers talking; knocks and claps under their speech and between utterances."""
    mix = _Mix()
    impulsive: list[tuple[str, list[str], float]] = [
        ("knock", ["knock_train3"], 0.0),
        ("clap", ["clap_gimme_hard"], 0.0),
        ("knock", KNOCK_TRAINS[0], 0.3),
        ("clap", ["clap_gimme_med"] * 3, 0.35),
        ("knock", ["knock_b"], 0.0),
        ("clap", ["clap_pearl"], 0.0),
    ]
    distractors = iter(
        [
            ("applause", "applause"),
            ("bell", "bell_ring"),
            ("music", "music_africa"),
            ("applause", "applause_ooo"),
            ("applause", "applause_whoop"),
            ("applause", "applause_gemdrop"),
        ]
    )
    for i, line in enumerate(SPEECH):
        start = mix.end
        stop = mix.add("speech", [line], -6.0)
        if i < len(impulsive):
            kind, names, spacing = impulsive[i]
            # Under the speech, in the middle of the utterance, then alone in the pause after it.
            middle = (start + stop) // 2 - round(0.2 * RATE)
            mix.add(kind, names, -8.0, spacing_s=spacing, at=middle, under_speech=True)
            mix.add(kind, names, -8.0, spacing_s=spacing)
        elif (extra := next(distractors, None)) is not None:
            mix.add(extra[0], [extra[1]], -8.0)
    return mix.render("speech", "noise_street", -60.0)


def fan() -> Scene:
    """Knocks, claps, the doorbell and speech in a loud fan."""
    mix = _Mix()
    _knocks_and_claps(mix, -8.0)
    mix.add("doorbell", ["doorbell"], -8.0)
    for name in SPEECH[::3]:
        mix.add("speech", [name], -6.0)
    return mix.render("fan", "noise_motor", -35.0)


SCENES = {"quiet": quiet, "speech": speech, "fan": fan}


@cache
def scene(name: str) -> Scene:
    """One scene by name (mixed once per process)."""
    return SCENES[name]()


def write(folder: Path) -> list[Path]:
    """Write every scene as ``NAME.wav`` (16 kHz mono PCM16) with ``NAME.truth.json`` beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in SCENES:
        s = scene(name)
        path = folder / f"{name}.wav"
        wavfile.write(path, RATE, np.round(s.audio * 32767).astype(np.int16))
        (folder / f"{name}.truth.json").write_bytes(msgspec.json.format(msgspec.json.encode(s.truth)))
        paths.append(path)
    return paths
