"""How the decoder's output layer upsamples to pixels: ``transposed`` (the layer as trained, a 4x4
transposed convolution of stride 2) or ``parity`` (the same products as a 2x2 convolution per output
parity, the four in one call, then interleaved).

A transposed convolution of stride 2, padding 1 and a 4x4 kernel makes each output pixel of parity (a, b)
(its row even or odd, its column even or odd) from a 2x2 patch of the input through four of the sixteen
taps: four 2x2 convolutions over the input padded by one give the four parities with the same multiplies.
To the picture's three channels, torch's transposed kernel ran at ~9 GMAC/s on one AVX2 thread where the
decoder's other convolutions run at ~40 (near that core's peak): the parity form took 1.4 ms against 2.8
for a chunk's four frames. For the decoder's wider layers it measured ~10 % slower, so they stay as they
are.

It changes the order of the sums, not what is summed: pixels agree to float rounding (~1e-6 before the
rounding to 8 bits), and ``onstage eval`` with ``upsample=transposed`` against ``parity`` measures what
that does to the picture. A chunk's frames (4 at 64x64) gave the same bits alone as beside other sessions'
in a batch here, as the transposed layer's do; oneDNN gave a lone 16x16 sample other bits than in a batch,
so this holds where it was checked, not for any shape: warm-up checks it for the machine it runs on
(``warmup.measure_batching``).
"""

from __future__ import annotations

import copy
from typing import Literal, cast, get_args

import torch
from torch import nn

from .choices import one_of
from .codec import Codec

Upsample = Literal["parity", "transposed"]
UPSAMPLES: tuple[str, ...] = get_args(Upsample)
"""The choices, the served default (``parity``) first."""

_TAPS = {0: (3, 1), 1: (2, 0)}
"""For an output row (column) of parity a, the kernel rows (columns) that meet input rows i - 1 + a and
i + a."""


def check_upsample(upsample: str) -> Upsample:
    """``upsample`` as an ``Upsample``; ``ValueError`` naming the choices for anything else."""
    return cast("Upsample", one_of(upsample, UPSAMPLES, "upsample"))


class ParityUpsample(nn.Module):
    """A ``ConvTranspose2d`` of kernel 4, stride 2 and padding 1 computed as one 2x2 convolution (padding 1)
    to four times its channels, one group per output parity, interleaved into the doubled picture."""

    def __init__(self, transposed: nn.ConvTranspose2d) -> None:
        super().__init__()
        shape = (transposed.kernel_size, transposed.stride, transposed.padding, transposed.output_padding)
        if (
            shape != ((4, 4), (2, 2), (1, 1), (0, 0))
            or transposed.groups != 1
            or transposed.dilation != (1, 1)
        ):
            raise ValueError(
                f"only a 4x4 transposed convolution of stride 2 and padding 1 has a parity form: {transposed}"
            )
        w = transposed.weight.detach()  # (in, out, 4, 4)
        self.channels = w.shape[1]
        self.conv = nn.Conv2d(w.shape[0], 4 * self.channels, 2, padding=1, bias=transposed.bias is not None)
        with torch.no_grad():
            for a, rows in _TAPS.items():
                for b, cols in _TAPS.items():
                    group = slice((2 * a + b) * self.channels, (2 * a + b + 1) * self.channels)
                    for dy, ky in enumerate(rows):
                        for dx, kx in enumerate(cols):
                            self.conv.weight[group, :, dy, dx] = w[:, :, ky, kx].T
            if transposed.bias is not None and self.conv.bias is not None:  # both or neither
                self.conv.bias.copy_(transposed.bias.detach().repeat(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, in, H, W) -> (N, out, 2H, 2W), channels last."""
        n, _, h, w = x.shape
        c = self.channels
        # Group (a, b) of the (H + 1, W + 1) map: output pixel (2i + a, 2j + b) at row i + a, column j + b.
        y = self.conv(x).permute(0, 2, 3, 1).reshape(n, h + 1, w + 1, 2, 2, c)
        out = y.new_empty(n, h, 2, w, 2, c)
        for a in (0, 1):
            for b in (0, 1):
                out[:, :, a, :, b] = y[:, a : a + h, b : b + w, a, b]
        return out.view(n, 2 * h, 2 * w, c).permute(0, 3, 1, 2)


def with_upsample(codec: Codec, upsample: Upsample) -> Codec:
    """``codec`` itself for ``transposed``; for ``parity`` a copy whose decoder's output layer is its
    ``ParityUpsample`` (``codec`` is left as it was)."""
    if check_upsample(upsample) == "transposed":
        return codec
    out = copy.deepcopy(codec)
    last = len(out.decoder.frame) - 1
    layer = out.decoder.frame[last]
    if not isinstance(layer, nn.ConvTranspose2d):
        raise ValueError(
            f"the decoder's output layer is {type(layer).__name__}, not a transposed convolution"
        )
    out.decoder.frame[last] = ParityUpsample(layer)
    return out
