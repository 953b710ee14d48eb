"""The latent codec: a 4-frame 128x128 RGB chunk <-> one 16x16xC latent frame (8x8 spatial, 4x temporal).

Frames are encoded one by one down to 16x16, then the four frames are folded into channels and mixed;
the decoder mirrors that. Pure 2D convolutions keep it fast on CPUs.
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
    """(B, C, 16, 16) -> (B, 4, 3, 128, 128) in about [-1, 1]."""

    def __init__(self, cfg: CodecConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.mix = nn.Sequential(
            nn.Conv2d(cfg.latent_channels, cfg.mix, 3, padding=1),
            ResBlock(cfg.mix),
            nn.SiLU(),
            nn.Conv2d(cfg.mix, cfg.frames * cfg.c3, 1),
        )
        self.frame = nn.Sequential(
            nn.SiLU(),
            nn.ConvTranspose2d(cfg.c3, cfg.c2, 4, stride=2, padding=1),
            ResBlock(cfg.c2),
            nn.SiLU(),
            nn.ConvTranspose2d(cfg.c2, cfg.c1, 4, stride=2, padding=1),
            nn.SiLU(),
            nn.ConvTranspose2d(cfg.c1, 3, 4, stride=2, padding=1),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        b = z.shape[0]
        h = self.mix(z)
        h = h.reshape(b * self.cfg.frames, self.cfg.c3, *h.shape[2:])
        out = self.frame(h)
        return out.reshape(b, self.cfg.frames, *out.shape[1:])


class Codec(nn.Module):
    """Encoder + decoder; `scale` maps latents to about unit variance for the diffusion model."""

    def __init__(self, cfg: CodecConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.register_buffer("scale", torch.ones(()))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Pixels in [-1, 1] -> normalised latents."""
        return self.encoder(x) * self.scale

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Normalised latents -> pixels in about [-1, 1]."""
        return self.decoder(z / self.scale)


def to_pixels(frames_uint8: torch.Tensor) -> torch.Tensor:
    """(..., H, W, 3) uint8 -> (..., 3, H, W) float in [-1, 1]."""
    return frames_uint8.permute(*range(frames_uint8.dim() - 3), -1, -3, -2).float() / 127.5 - 1.0


def to_uint8(pixels: torch.Tensor) -> torch.Tensor:
    """(..., 3, H, W) float in [-1, 1] -> (..., H, W, 3) uint8."""
    x = ((pixels.float().clamp(-1, 1) + 1.0) * 127.5).round().to(torch.uint8)
    return x.permute(*range(x.dim() - 3), -2, -1, -3)
