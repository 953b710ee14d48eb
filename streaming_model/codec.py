"""The latent codec: a 4-frame 128x128 RGB chunk <-> one 16x16xC latent frame (8x8 spatial, 4x temporal).

Frames are encoded one by one down to 16x16, then the four frames are folded into channels and mixed;
the decoder mirrors that. Pure 2D convolutions keep it fast on CPUs.

The decoder can also read the voice (the audio envelope while speaking), frame by frame. Four frames share
one latent frame, so the latent cannot say which of them has the mouth open; the voice can. The decoder
draws the mouth from it where the latent puts the face: lip sync at frame rate, as talking-head systems
do with a dedicated audio-driven stage.
"""

from __future__ import annotations

import msgspec
import torch
from torch import nn
from torch.nn import functional as F


class CodecConfig(msgspec.Struct, frozen=True):
    """Shape of the codec; stored in the weights header so a loader can check it."""

    latent_channels: int = 16
    frames: int = 4
    c1: int = 32  # 64x64
    c2: int = 64  # 32x32
    c3: int = 128  # 16x16, per frame
    mix: int = 192  # 16x16, all frames folded
    voice_taps: int = 0  # voice values per frame the decoder reads (this frame's and those before); 0: none
    frame_res: bool = True
    """Whether the decoder has a residual block at 32x32 per frame: a third of its work on a CPU; a decoder
    without (``codec_train --slim``) is that much cheaper."""
    mix_res: bool = True
    """Whether the decoder has a residual block at 16x16 over the frames folded together, before they part:
    a quarter of a slim decoder's time on one AVX2 thread; ``codec_train --slim --lean`` leaves it out."""


class ResBlock(nn.Module):
    """Two 3x3 convolutions with a skip."""

    def __init__(self, ch: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(ch, ch, 3, padding=1)
        self.c2 = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.c2(F.silu(self.c1(F.silu(x))))


class Encoder(nn.Module):
    """(B, 4, 3, 128, 128) in [-1, 1] -> (B, C, 16, 16)."""

    def __init__(self, cfg: CodecConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.frame = nn.Sequential(
            nn.Conv2d(3, cfg.c1, 3, stride=2, padding=1),
            nn.SiLU(),
            nn.Conv2d(cfg.c1, cfg.c2, 3, stride=2, padding=1),
            ResBlock(cfg.c2),
            nn.Conv2d(cfg.c2, cfg.c3, 3, stride=2, padding=1),
        )
        self.mix = nn.Sequential(
            nn.Conv2d(cfg.frames * cfg.c3, cfg.mix, 1),
            ResBlock(cfg.mix),
            nn.SiLU(),
            nn.Conv2d(cfg.mix, cfg.latent_channels, 3, padding=1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t = x.shape[:2]
        h = self.frame(x.flatten(0, 1))
        return self.mix(h.reshape(b, t * h.shape[1], *h.shape[2:]))


class Decoder(nn.Module):
    """(B, C, 16, 16) and optionally the voice taps (B, 4, voice_taps) -> (B, 4, 3, 128, 128) in about
    [-1, 1]."""

    def __init__(self, cfg: CodecConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.mix = nn.Sequential(
            nn.Conv2d(cfg.latent_channels, cfg.mix, 3, padding=1),
            ResBlock(cfg.mix) if cfg.mix_res else nn.Identity(),  # in place, so the layers keep their names
            nn.SiLU(),
            nn.Conv2d(cfg.mix, cfg.frames * cfg.c3, 1),
        )
        self.frame = nn.Sequential(
            nn.SiLU(),
            nn.ConvTranspose2d(cfg.c3, cfg.c2, 4, stride=2, padding=1),
            ResBlock(cfg.c2) if cfg.frame_res else nn.Identity(),  # in place, so the layers keep their names
            nn.SiLU(),
            nn.ConvTranspose2d(cfg.c2, cfg.c1, 4, stride=2, padding=1),
            nn.SiLU(),
            nn.ConvTranspose2d(cfg.c1, 3, 4, stride=2, padding=1),
        )
        if cfg.voice_taps:
            # Per-frame scale and shift of the features at 16x16 and 32x32 (a scale acts only where the
            # latent put something, such as the face); zero at first, so a decoder trained without the
            # voice starts out unchanged.
            self.voice16 = nn.Linear(cfg.voice_taps, 2 * cfg.c3)
            self.voice32 = nn.Linear(cfg.voice_taps, 2 * cfg.c2)
            for lin in (self.voice16, self.voice32):
                nn.init.zeros_(lin.weight)
                nn.init.zeros_(lin.bias)

    def forward(self, z: torch.Tensor, taps: torch.Tensor | None = None) -> torch.Tensor:
        b, f = z.shape[0], self.cfg.frames
        h = self.mix(z)
        h = h.reshape(b * f, self.cfg.c3, *h.shape[2:])
        if self.cfg.voice_taps:
            v = (
                torch.zeros(b, f, self.cfg.voice_taps, device=z.device) if taps is None else taps.float()
            ).reshape(b * f, -1)
            h = _film(h, self.voice16(v))
            h = _film(self.frame[:3](h), self.voice32(v))
            out = self.frame[3:](h)
        else:
            out = self.frame(h)
        return out.reshape(b, f, *out.shape[1:])


def _film(h: torch.Tensor, mod: torch.Tensor) -> torch.Tensor:
    """h (N, c, H, W) scaled and shifted per channel by mod (N, 2c)."""
    scale, shift = mod.to(h.dtype)[..., None, None].chunk(2, dim=1)
    return h * (1 + scale) + shift


def chunk_voices(voice: torch.Tensor, taps: int, frames: int = 4) -> torch.Tensor:
    """Per-frame voice values (N, K*frames) of K chunks in a row -> each chunk's values with the
    taps - 1 before it (silence before the first), (N, K, taps - 1 + frames): what ``decode`` reads."""
    n, total = voice.shape
    tail = max(taps - 1, 0)
    padded = torch.cat([torch.zeros(n, tail, dtype=voice.dtype), voice], dim=1)
    return torch.stack([padded[:, c : c + tail + frames] for c in range(0, total, frames)], dim=1)


def voice_taps(voice: torch.Tensor, taps: int, frames: int = 4) -> torch.Tensor:
    """Per-frame taps (B, frames, taps) from a chunk's voice values with the taps - 1 values before it,
    (B, taps - 1 + frames): frame j reads its own value, then the one before, and so on."""
    if voice.shape[-1] != taps - 1 + frames:
        raise ValueError(f"voice needs {taps - 1 + frames} values per chunk, got {voice.shape[-1]}")
    return torch.stack([voice[..., j : j + taps].flip(-1) for j in range(frames)], dim=-2)


class Codec(nn.Module):
    """Encoder + decoder; `scale` maps latents to about unit variance for the diffusion model."""

    scale: torch.Tensor  # a registered buffer

    def __init__(self, cfg: CodecConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.register_buffer("scale", torch.ones(()))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Pixels in [-1, 1] -> normalised latents."""
        return self.encoder(x) * self.scale

    def decode(self, z: torch.Tensor, voice: torch.Tensor | None = None) -> torch.Tensor:
        """Normalised latents -> pixels in about [-1, 1].

        voice: the chunk's voice values (audio envelope while speaking, else 0) with the values of the
        frames before it, (B, voice_taps - 1 + 4); None is silence. Ignored by a codec without voice taps.
        """
        taps = None
        if voice is not None and self.cfg.voice_taps:
            taps = voice_taps(voice, self.cfg.voice_taps, self.cfg.frames)
        return self.decoder(z / self.scale, taps)


def to_pixels(frames_uint8: torch.Tensor) -> torch.Tensor:
    """(..., H, W, 3) uint8 -> (..., 3, H, W) float in [-1, 1]."""
    return frames_uint8.permute(*range(frames_uint8.dim() - 3), -1, -3, -2).float() / 127.5 - 1.0


def to_uint8(pixels: torch.Tensor) -> torch.Tensor:
    """(..., 3, H, W) float in [-1, 1] -> (..., H, W, 3) uint8."""
    x = ((pixels.float().clamp(-1, 1) + 1.0) * 127.5).round().to(torch.uint8)
    return x.permute(*range(x.dim() - 3), -2, -1, -3)
