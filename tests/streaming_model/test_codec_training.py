"""What the codec's decoder is taught from: with the scene, worlds whose scene changes, each chunk beside the
same chunk rendered silent (the voice's lesson) under the same scene; its loss weighs up the character and
its face under any light."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from streaming_model.loading import CODEC_PATH, load_codec
from streaming_model.scene_probes import measure_scene
from streaming_model.train.codec_data import POOL_CHUNKS, POOL_WORLDS, ChunkPool, voiced_chunks
from streaming_model.train.codec_train import build_model, character_weight, export
from streaming_model.train.pixels import character_pixels, face_pixels
from streaming_model.world.episodes import Episode


def decoder_args(
    ckpt_dir: Path,
    encoder: Path = CODEC_PATH,
    slim: bool = False,
    lean: bool = False,
    start: Path | None = None,
) -> argparse.Namespace:
    """``codec_train``'s arguments for a decoder taught on the ``encoder`` codec's latents, on the CPU."""
    return argparse.Namespace(
        ckpt_dir=ckpt_dir, decoder_only=True, encoder=encoder, device="cpu", slim=slim, lean=lean, start=start
    )


def test_scene_chunks_show_a_changing_scene_and_their_silent_copies_differ_only_at_the_mouth() -> None:
    frames, silent, voice = voiced_chunks(3, 4, 24, 3, scene=True)
    plain, _, _ = voiced_chunks(3, 4, 24, 3)
    assert frames.shape == silent.shape == plain.shape and voice.shape == (4 * 24, 3 - 1 + 4)
    scene = measure_scene(frames.reshape(-1, *frames.shape[2:]).numpy())
    assert scene.light.std(0).max() > 0.1 and (scene.door_shown.any() or scene.ball_shown.any())
    differ = (frames != silent).any(-1).reshape(-1, 128, 128).numpy()
    assert differ.any()  # the voice opens the mouth in one and not the other
    for frame in differ[differ.any((1, 2))]:
        rows, cols = np.nonzero(frame)
        assert rows.max() - rows.min() < 16 and cols.max() - cols.min() < 24  # a mouth, not the scene
    assert not np.array_equal(frames.numpy(), plain.numpy())


def test_at_night_in_the_rain_the_codecs_loss_weighs_up_the_character_and_its_face_not_the_scene(
    night_rain: Episode,
) -> None:
    ep = night_rain
    assert ep.scenery is not None and (ep.truth["light"][0, -4:] < 0.6).all()  # settled at night
    frames, alone, light = ep.frames[:, -4:], ep.scenery[:, -4:], ep.truth["light"][:, -4:]
    char = torch.from_numpy(character_pixels(frames, alone))
    face = torch.from_numpy(face_pixels(frames, light))
    # The face is found, on the character (but for a few pixels of the eyes' white, dimmed near the night sky).
    assert face.sum() > 100 and face[~char].sum() < 0.05 * face.sum()
    assert 0.02 < char.float().mean() < 0.2  # the character, not the rain, the door or the night sky
    w = character_weight(char, face, face=8.0)
    assert w.max() == 13.0 and w.min() == 1.0
    undimmed = torch.from_numpy(face_pixels(frames))  # without the light divided out, the night's dark
    assert undimmed[~char].sum() > 1000  # floor passes for the mouth's line


def test_a_pool_refreshed_by_a_background_process_swaps_in_its_fresh_worlds() -> None:
    pool = ChunkPool(taps=0, scene=True, alternate=True, first_seed=0, fetches=2, workers=1)
    try:
        n = 2 * POOL_WORLDS * POOL_CHUNKS
        assert len(pool.parts.target) == n and pool.parts.today.sum() == n // 2  # every other render today's
        before = pool.parts.target.clone()
        pool.pending[0].result()  # the render in flight has finished
        pool.refresh(torch.Generator().manual_seed(0))
        changed = (pool.parts.target != before).flatten(1).any(1)
        assert 0 < changed.sum() <= POOL_WORLDS * POOL_CHUNKS  # one render's chunks swapped in
        assert len(pool.pending) == 1  # and the next render is on its way
    finally:
        pool.close()


def test_a_decoder_taught_alone_keeps_the_encoder_and_scale_it_was_given_frozen(tmp_path: Path) -> None:
    # An encoder trained elsewhere (as the anchored stage trains one), with its own latent scale.
    given = load_codec()
    with torch.no_grad():
        for p in given.parameters():
            p.add_(0.01 * torch.randn_like(p))
    given.scale.fill_(0.5)
    val = torch.zeros(1, 4, 64, 64, 3, dtype=torch.uint8)
    export(given, val, {}, rescale=False, path=tmp_path / "given.safetensors")
    args = decoder_args(tmp_path, encoder=tmp_path / "given.safetensors")
    model, anchor, resumed = build_model(args, taps=given.cfg.voice_taps, anchored=False)
    assert anchor is None and resumed is None
    saved = load_codec(tmp_path / "given.safetensors")  # as written: fp16
    for name, p in model.encoder.named_parameters():
        assert torch.equal(p, saved.encoder.get_parameter(name)) and not p.requires_grad
    assert float(model.scale) == 0.5
    # The decoder starts from the given codec's, not the shipped one's, and is what learns.
    first = next(iter(saved.decoder.state_dict()))
    assert torch.equal(model.decoder.state_dict()[first], saved.decoder.state_dict()[first])
    assert not torch.equal(model.decoder.state_dict()[first], load_codec().decoder.state_dict()[first])
    assert all(p.requires_grad for p in model.decoder.parameters())


def test_a_slim_decoder_starts_from_the_shipped_decoders_other_layers_and_does_a_third_less_work(
    tmp_path: Path,
) -> None:
    args = decoder_args(tmp_path, slim=True)
    shipped = load_codec()
    model, _, _ = build_model(args, taps=shipped.cfg.voice_taps, anchored=False)
    assert not model.cfg.frame_res and isinstance(model.decoder.frame[2], torch.nn.Identity)
    kept = model.decoder.state_dict()
    dropped = [k for k in shipped.decoder.state_dict() if k not in kept]
    assert dropped and all(k.startswith("frame.2.") for k in dropped)  # the per-frame residual block alone
    assert all(torch.equal(v, shipped.decoder.state_dict()[k].float()) for k, v in kept.items())
    macs = {"shipped": 0, "slim": 0}

    def count(name: str):
        def hook(layer: torch.nn.Module, inputs: tuple[torch.Tensor], out: torch.Tensor) -> None:
            assert isinstance(layer, torch.nn.Conv2d | torch.nn.ConvTranspose2d)
            taps = layer.kernel_size[0] * layer.kernel_size[1]
            if isinstance(layer, torch.nn.ConvTranspose2d):  # each input value meets every output channel
                macs[name] += inputs[0].numel() * layer.out_channels * taps
            else:
                macs[name] += out.numel() * layer.in_channels * taps

        return hook

    z = torch.zeros(1, 16, 16, 16)
    for name, codec in (("shipped", shipped), ("slim", model)):
        for layer in codec.decoder.modules():
            if isinstance(layer, torch.nn.Conv2d | torch.nn.ConvTranspose2d):
                layer.register_forward_hook(count(name))
        with torch.inference_mode():
            assert codec.decode(z).shape == (1, 4, 3, 128, 128)
    assert 0.55 < macs["slim"] / macs["shipped"] < 0.7
    # A decoder taught on from a slim codec (the scene's lesson, say) stays slim.
    export(
        model,
        torch.zeros(1, 4, 64, 64, 3, dtype=torch.uint8),
        {},
        rescale=False,
        path=tmp_path / "s.safetensors",
    )
    args.slim, args.encoder, args.ckpt_dir = False, tmp_path / "s.safetensors", tmp_path / "on"
    heir, _, _ = build_model(args, taps=shipped.cfg.voice_taps, anchored=False)
    assert not heir.cfg.frame_res


def test_a_lean_decoder_starts_from_the_given_codecs_decoder_without_either_residual_block(
    tmp_path: Path,
) -> None:
    shipped, other = load_codec(), load_codec()
    with torch.no_grad():
        for p in other.decoder.parameters():
            p.add_(0.01 * torch.randn_like(p))
    given = tmp_path / "given.safetensors"
    export(other, torch.zeros(1, 4, 64, 64, 3, dtype=torch.uint8), {}, rescale=False, path=given)
    args = decoder_args(tmp_path, slim=True, lean=True, start=given)
    model, _, _ = build_model(args, taps=shipped.cfg.voice_taps, anchored=False)
    assert not model.cfg.frame_res and not model.cfg.mix_res
    assert isinstance(model.decoder.mix[1], torch.nn.Identity)
    kept = model.decoder.state_dict()
    dropped = {k.split(".")[0] + "." + k.split(".")[1] for k in shipped.decoder.state_dict() if k not in kept}
    assert dropped == {"frame.2", "mix.1"}  # the per-frame and the mixing residual blocks, nothing else
    saved = load_codec(given)  # as written: fp16; the lean decoder starts from its layers, not --encoder's
    assert all(torch.equal(v, saved.decoder.state_dict()[k].float()) for k, v in kept.items())
    assert not torch.equal(kept["mix.0.weight"], shipped.decoder.state_dict()["mix.0.weight"].float())
    with torch.inference_mode():
        assert model.decode(torch.zeros(1, 16, 16, 16)).shape == (1, 4, 3, 128, 128)
