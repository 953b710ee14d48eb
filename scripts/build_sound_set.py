"""Rebuild the real-recording clips of tests/data/sounds/ from the Debian packages that ship them.

    python scripts/build_sound_set.py [--cache DIR] [--out tests/data/sounds]

Every clip is a real recording that ships inside a Debian package: door knocks, hand claps, applause, a
doorbell, bells, footsteps, coughs, music, a dog, a crowd, speech by several speakers, and machine noise.
The script downloads each package with ``apt-get download`` (into ``--cache``), unpacks it with
``dpkg -x`` (nothing is installed), reads the sound file (GCompris keeps its sounds inside Qt ``.rcc``
resource bundles, read here; the Asterisk prompts are G.722, decoded with PyAV), cuts the part named
below, turns it into 16 kHz mono 16-bit PCM with its peak at ``PEAK_DBFS``, and writes it as
``<name>.wav`` beside ``clips.json``, which records for each clip its kind, package, version, source
path, cut, licence and copyright holder.

The clips are committed one file each, with their own licences; the test scenes
(``tests/support/sound_set.py``) are mixed from them in memory when a test or benchmark runs, so the
repository holds no mixed work that would combine their licences. Only set-up time needs this script
(and the registry); run time needs nothing but the committed clips.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import struct
import subprocess
import zlib
from pathlib import Path

import msgspec
import numpy as np
import soundfile
from scipy.signal import resample_poly

RATE = 16_000
PEAK_DBFS = -1.0
ROOT = Path(__file__).resolve().parents[1]


class Clip(msgspec.Struct, frozen=True):
    """One cut of one sound file inside one package."""

    name: str
    kind: str
    package: str
    path: str
    """Inside the unpacked package; ``file.rcc:inner/path`` for a file inside a Qt resource bundle."""
    start_s: float = 0.0
    duration_s: float | None = None
    """None: to the end of the file."""
    note: str = ""


GC = "usr/share/gcompris-qt/rcc"
GC_MEM = f"{GC}/memory-sound.rcc:gcompris/src/activities/memory-sound/resource"
HY = "usr/share/hydrogen/data/drumkits"
HW = "usr/share/games/hedgewars/Data/Sounds/voices"
MT = "usr/share/games/minetest/games/minetest_game/mods/default/sounds"
AST = "usr/share/asterisk/sounds"

CLIPS: list[Clip] = [
    # Door knocks: the only real door knock found in the registries is GCompris's three knuckle raps;
    # each rap is also cut out alone, and the scenes arrange singles and trains from them.
    Clip(
        "knock_train3",
        "knock",
        "gcompris-qt-data",
        f"{GC}/melody.rcc:gcompris/src/activities/melody/resource/knock.wav",
        note="three knocks on a door, 250 ms apart",
    ),
    Clip(
        "knock_a",
        "knock",
        "gcompris-qt-data",
        f"{GC}/melody.rcc:gcompris/src/activities/melody/resource/knock.wav",
        0.0,
        0.25,
    ),
    Clip(
        "knock_b",
        "knock",
        "gcompris-qt-data",
        f"{GC}/melody.rcc:gcompris/src/activities/melody/resource/knock.wav",
        0.25,
        0.25,
    ),
    Clip(
        "knock_c",
        "knock",
        "gcompris-qt-data",
        f"{GC}/melody.rcc:gcompris/src/activities/melody/resource/knock.wav",
        0.50,
        0.30,
    ),
    # Hand claps: Hydrogen's "Gimme A Hand" kit (one pair of hands at five strengths) and Millo's claps.
    *[
        Clip(
            f"clap_gimme_{s.lower()}", "clap", "hydrogen-drumkits", f"{HY}/Gimme A Hand 1.0/HandClap-{s}.wav"
        )
        for s in ("Softest", "Soft", "Med", "Hard", "Hardest")
    ],
    *[
        Clip(f"clap_millo_{i}", "clap", "hydrogen-drumkits", f"{HY}/Millo_MultiLayered2/clap_0{i}.flac")
        for i in (1, 3)
    ],
    Clip("clap_pearl", "clap", "hydrogen-drumkits", f"{HY}/The Black Pearl 1.0/HandClap.wav"),
    Clip(
        "applause",
        "applause",
        "gcompris-qt-data",
        f"{GC_MEM}/LRApplauses_1_LA_cut.ogg",
        note="opens with ~90 ms of a voice (a shout at 141 Hz)",
    ),
    # More applause, each its own recording (frozen-bubble's is also lmms-common's applause01.ogg).
    Clip(
        "applause_whoop",
        "applause",
        "gambas3-examples",
        "usr/share/doc/gambas3-examples/examples/Games/Concent/applause.wav",
        note="opens with a whoop (a voice)",
    ),
    Clip("applause_ooo", "applause", "monsterz-data", "usr/share/games/monsterz/sound/applause.wav"),
    Clip(
        "applause_circus",
        "applause",
        "circuslinux-data",
        "usr/share/games/circuslinux/data/sounds/applause.wav",
    ),
    Clip("applause_gemdrop", "applause", "gemdropx", "usr/share/games/gemdropx/sounds/applause.wav"),
    Clip(
        "applause_bubble", "applause", "frozen-bubble-data", "usr/share/games/frozen-bubble/snd/applause.ogg"
    ),
    Clip("crowd_cheer", "crowd", "lincity-ng-data", "usr/share/games/lincity-ng/sounds/SportsCroud1.wav"),
    # Doorbell and bells.
    Clip(
        "doorbell",
        "doorbell",
        "minetest-mod-homedecor",
        "usr/share/games/minetest/mods/homedecor/homedecor_electrical/sounds/homedecor_doorbell.ogg",
    ),
    Clip("bell_ring", "bell", "gcompris-qt-data", f"{GC_MEM}/LRRing_01_LA.ogg"),
    Clip("bell_gong", "bell", "gcompris-qt-data", f"{GC_MEM}/LRBuddhist_gong_05_LA.ogg", 0.0, 3.0),
    Clip("bell_desktop", "bell", "sound-theme-freedesktop", "usr/share/sounds/freedesktop/stereo/bell.oga"),
    Clip("bell_cowbell", "bell", "hydrogen-drumkits", f"{HY}/Gimme A Hand 1.0/Cowbell-Med.wav"),
    # Distractors.
    *[
        Clip(f"step_wood_{i}", "footsteps", "minetest-data", f"{MT}/default_wood_footstep.{i}.ogg")
        for i in (1, 2)
    ],
    *[
        Clip(f"step_hard_{i}", "footsteps", "minetest-data", f"{MT}/default_hard_footstep.{i}.ogg")
        for i in (1, 2, 3)
    ],
    *[
        Clip(f"cough_{v.lower()}", "cough", "hedgewars-data", f"{HW}/{v}/PoisonCough.ogg")
        for v in ("Default", "HillBilly", "Default_es")
    ],
    Clip("dog_bark", "dog", "gcompris-qt-data", f"{GC_MEM}/LRBark_1_LA_cut.ogg"),
    Clip(
        "dog_farm",
        "dog",
        "gcompris-qt-data",
        f"{GC}/explore_farm_animals.rcc:gcompris/src/activities/explore_farm_animals/resource/animals/dog.ogg",
    ),
    Clip(
        "music_america",
        "music",
        "gcompris-qt-data",
        f"{GC}/explore_world_music.rcc:gcompris/src/activities/explore_world_music/resource/music/america.ogg",
        10.0,
        4.0,
    ),
    Clip(
        "music_africa",
        "music",
        "gcompris-qt-data",
        f"{GC}/explore_world_music.rcc:gcompris/src/activities/explore_world_music/resource/music/africa.ogg",
        5.0,
        4.0,
    ),
    # Speech: five speakers of the Asterisk prompts (G.722, 16 kHz), and short calls of two Kajongg voices.
    *[
        Clip(f"speech_{speaker}_{i}", "speech", pkg, f"{AST}/{speaker}/{prompt}.g722")
        for pkg, speaker, prompts in (
            ("asterisk-core-sounds-en-g722", "en_US_f_Allison", ("conf-onlyperson", "at-tone-time-exactly")),
            ("asterisk-core-sounds-fr-g722", "fr_CA_f_June", ("conf-getchannel", "check-number-dial-again")),
            ("asterisk-core-sounds-it-g722", "it_IT_m_Carlo", ("conf-getchannel", "agent-pass")),
            ("asterisk-core-sounds-ru-g722", "ru_RU_f_IvrvoiceRU", ("auth-incorrect", "conf-invalid")),
            ("asterisk-core-sounds-es-g722", "es_MX_f_Allison", ("conf-onlyperson",)),
        )
        for i, prompt in enumerate(prompts)
    ],
    Clip("speech_kajongg_male1", "speech", "kajongg", "usr/share/kajongg/voices/male1/dangerousgame.ogg"),
    Clip(
        "speech_kajongg_female1",
        "speech",
        "kajongg",
        "usr/share/kajongg/voices/female1/violatesoriginalcall.ogg",
    ),
    Clip("speech_hedgewars_hello", "speech", "hedgewars-data", f"{HW}/Default/Youllregretthat.ogg"),
    # Background noise: no room tone ships. A distant street (LinCity-NG's light traffic) stands for the quiet
    # room, a vacuum cleaner's steady motor (Tux Paint) for the fan.
    Clip("noise_street", "noise", "lincity-ng-data", "usr/share/games/lincity-ng/sounds/TraficLow1.wav"),
    Clip(
        "noise_motor",
        "noise",
        "tuxpaint-stamps-default",
        "usr/share/tuxpaint/stamps/household/vacuum_cleaner.ogg",
        0.05,
        0.75,
    ),
]

LICENCES = {
    "gcompris-qt-data": (
        "GPL-3+ (knock, dog, music); Free Art License 1.3 (memory-sound *_LA clips)",
        "Timothée Giet, Lionel Allorge, Yves Combe and the GCompris authors",
    ),
    "hydrogen-drumkits": ("GPL-2", "Glen MacArthur (Gimme A Hand, The Black Pearl); Emiliano Grilli (Millo)"),
    "lincity-ng-data": ("GPL-2+", "the LinCity-NG authors"),
    "gambas3-examples": ("GPL-2+", "Jairo Alonso Badillo Bedoya"),
    "monsterz-data": ("LGPL-2.1", "Sun Microsystems, Inc. (OpenOffice.org's applause.wav)"),
    "circuslinux-data": ("GPL (no version named)", "Bill Kendrick"),
    "gemdropx": ("GPL-2", "Justin C. Kibell and others"),
    "frozen-bubble-data": ("GPL-2", "the Frozen-Bubble Team"),
    "tuxpaint-stamps-default": ("GPL-2", "Bill Kendrick and the Tux Paint authors"),
    "minetest-mod-homedecor": ("CC-BY-SA-4.0", "Vanessa Ezekowitz"),
    "minetest-data": ("CC-BY-SA-3.0", "the Minetest Game authors"),
    "sound-theme-freedesktop": ("CC-BY-3.0", "Dr. Richard Boulanger et al"),
    "hedgewars-data": ("GFDL-1.3", "Andrey Korotaev and the Hedgewars authors"),
    "kajongg": ("GPL-2+", "Wolfgang Rohdewald and the Kajongg authors"),
    "asterisk-core-sounds-en-g722": ("CC-BY-SA-3.0", "Allison Smith"),
    "asterisk-core-sounds-es-g722": ("CC-BY-SA-3.0", "Allison Smith"),
    "asterisk-core-sounds-fr-g722": ("CC-BY-SA-3.0", "June Wallack"),
    "asterisk-core-sounds-it-g722": ("CC-BY-3.0", "Carlo Flora"),
    "asterisk-core-sounds-ru-g722": ("CC-BY-3.0", "Maxim Topal"),
}


def rcc_member(bundle: bytes, inner: str) -> bytes:
    """One file out of a Qt binary resource bundle (format version 1-3: tree, names, data)."""
    if bundle[:4] != b"qres":
        raise ValueError("not a Qt resource bundle")
    version, tree, data, names = struct.unpack(">IIII", bundle[4:20])
    size = 22 if version >= 2 else 14

    def name(offset: int) -> str:
        (n,) = struct.unpack(">H", bundle[names + offset : names + offset + 2])
        return bundle[names + offset + 6 : names + offset + 6 + 2 * n].decode("utf-16-be")

    node = 0
    for part in inner.split("/"):
        e = tree + node * size
        _, flags, count, first = struct.unpack(">IHII", bundle[e : e + 14])
        if not flags & 2:
            raise KeyError(inner)
        for child in range(first, first + count):
            c = tree + child * size
            if name(struct.unpack(">I", bundle[c : c + 4])[0]) == part:
                node = child
                break
        else:
            raise KeyError(inner)
    e = tree + node * size
    (flags,) = struct.unpack(">H", bundle[e + 4 : e + 6])
    (offset,) = struct.unpack(">I", bundle[e + 10 : e + 14])
    (length,) = struct.unpack(">I", bundle[data + offset : data + offset + 4])
    blob = bundle[data + offset + 4 : data + offset + 4 + length]
    return zlib.decompress(blob[4:]) if flags & 1 else blob


def unpack(package: str, cache: Path) -> tuple[Path, str]:
    """The unpacked tree of ``package`` and its version, downloading it once."""
    tree = cache / "x" / package
    debs = sorted((cache / "debs").glob(f"{package}_*.deb"))
    if not debs:
        (cache / "debs").mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", "-q", package], cwd=cache / "debs", check=True)
        debs = sorted((cache / "debs").glob(f"{package}_*.deb"))
    if not tree.exists():
        tree.parent.mkdir(parents=True, exist_ok=True)  # dpkg -x makes the tree, not the folders above it
        subprocess.run(["dpkg", "-x", str(debs[-1]), str(tree)], check=True)
    version = subprocess.run(
        ["dpkg-deb", "-f", str(debs[-1]), "Version"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return tree, version


def decode(data: bytes, suffix: str) -> tuple[np.ndarray, int]:
    """Mono float samples and their rate, from the bytes of one sound file."""
    if suffix == ".g722":
        import av  # PyAV (FFmpeg inside the wheel) decodes G.722; only set-up needs it

        with av.open(io.BytesIO(data), mode="r", format="g722") as container:
            frames = [f.to_ndarray().reshape(-1) for f in container.decode(audio=0)]
        pcm = np.concatenate(frames)
        return (pcm.astype(np.float32) / 32768.0 if pcm.dtype == np.int16 else pcm.astype(np.float32)), RATE
    audio, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    return audio.mean(axis=1), rate


def build(clip: Clip, tree: Path) -> np.ndarray:
    outer, _, inner = clip.path.partition(":")
    data = (tree / outer).read_bytes()
    if inner:
        data = rcc_member(data, inner)
    audio, rate = decode(data, Path(inner or outer).suffix)
    if rate != RATE:
        g = np.gcd(RATE, rate)
        audio = resample_poly(audio, RATE // g, rate // g).astype(np.float32)
    start = round(clip.start_s * RATE)
    stop = audio.size if clip.duration_s is None else start + round(clip.duration_s * RATE)
    audio = audio[start:stop]
    audio -= audio.mean()
    peak = float(np.abs(audio).max())
    return audio * (10 ** (PEAK_DBFS / 20) / peak)


def readme(records: list[dict[str, object]]) -> str:
    """The licence table of the clips, grouped by package."""
    groups: dict[tuple[object, ...], list[str]] = {}
    for r in records:
        key = (r["package"], r["version"], r["licence"], r["copyright"])
        groups.setdefault(key, []).append(str(r["name"]))
    lines = [
        "# Real recordings for the ears' tests",
        "",
        "Cut out of Debian packages by `scripts/build_sound_set.py` (which rebuilds every file here from the",
        "packages), 16 kHz mono PCM16, peak at -1 dBFS. Each clip stays a file of its own under its own licence;",
        "the test scenes are mixed from them in memory (`tests/support/sound_set.py`). `clips.json` gives each",
        "clip's source path and cut.",
        "",
        "| clips | package (version) | licence | copyright |",
        "|---|---|---|---|",
    ]
    lines += [f"| {', '.join(n)} | {p} ({v}) | {lic} | {c} |" for (p, v, lic, c), n in groups.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cache", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "onstage-sound-debs"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "sounds")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    records = []
    for clip in CLIPS:
        tree, version = unpack(clip.package, args.cache)
        audio = build(clip, tree)
        pcm = np.clip(np.round(audio * 32767), -32768, 32767).astype(np.int16)
        soundfile.write(args.out / f"{clip.name}.wav", pcm, RATE, subtype="PCM_16")
        licence, holder = LICENCES[clip.package]
        records.append(
            {
                **msgspec.to_builtins(clip),
                "version": version,
                "seconds": round(pcm.size / RATE, 3),
                "licence": licence,
                "copyright": holder,
            }
        )
        print(f"{clip.name:28s} {clip.kind:9s} {pcm.size / RATE:5.2f} s  {clip.package} {version}")
    (args.out / "clips.json").write_text(json.dumps(records, indent=1, ensure_ascii=False) + "\n")
    (args.out / "README.md").write_text(readme(records))


if __name__ == "__main__":
    main()
