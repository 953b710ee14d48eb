"""A configuration's options as text: what each key takes, and an error naming the key and what would do;
the damaged cache they can ask for is seeded like the rest, and absent unless asked for. A shortened
script names actions the model has, each once."""

from __future__ import annotations

import numpy as np
import pytest

from streaming_model.condition import ChunkCondition
from streaming_model.eval.options import RunOptions, parse_actions, parse_options
from streaming_model.loading import CODEC_PATH, SLIM_CODEC_PATH, load_codec, weights_file
from streaming_model.runtime import Generator


def test_a_shortened_script_holds_the_actions_named_in_their_order_each_once() -> None:
    assert parse_actions(["walk_right", "sit", "wave"]) == ("walk_right", "sit", "wave")
    with pytest.raises(ValueError, match="at least one action"):
        parse_actions([])


def test_options_parse_into_the_runtime_options_and_default_to_a_served_session() -> None:
    assert parse_options([]) == RunOptions(steps=1, cache="write_time", precision="auto", cache_noise=0.0)
    options = parse_options(["steps=1", " cache = naive", "precision=fp32", "cache_noise=0.5"])
    assert options == RunOptions(steps=1, cache="naive", precision="fp32", cache_noise=0.5)
    assert (
        options.describe()
        == "steps=1 cache=naive precision=fp32 linears=auto cache_noise=0.5 commit_pass=fused dit=shipped codec=slim"
        " upsample=parity kernels=auto"
    )
    assert options.describe(["cache"]) == "cache=naive"


def test_a_candidate_can_be_other_weights_given_as_files() -> None:
    options = parse_options(["dit=streaming_model/weights/dit.safetensors"])
    assert options.dit == "streaming_model/weights/dit.safetensors" and options.codec == "slim"


def test_the_served_codec_is_the_slim_one_and_its_full_teacher_is_named() -> None:
    options = parse_options(["linears=int8"])
    assert options.describe(["codec", "linears"]) == "codec=slim linears=int8"
    assert weights_file("codec", options.codec) == SLIM_CODEC_PATH
    assert Generator.load().codec.cfg == load_codec(SLIM_CODEC_PATH).cfg  # what sessions decode with
    full = parse_options(["codec=full"])
    assert weights_file("codec", full.codec) == CODEC_PATH
    assert not load_codec(SLIM_CODEC_PATH).cfg.frame_res and load_codec(CODEC_PATH).cfg.frame_res


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("stepz=2", "unknown option 'stepz'; the options are: steps, cache, precision, linears, cache_noise"),
        ("steps=0", "option steps takes an integer >= 1, not '0'"),
        ("steps=two", "option steps takes an integer >= 1, not 'two'"),
        ("cache=fast", "option cache takes write_time or naive, not 'fast'"),
        ("precision=fp16", "option precision takes auto, bf16, fp32, not 'fp16'"),
        ("cache_noise=-1", "option cache_noise takes a number >= 0"),
        ("cache_noise=nan", "option cache_noise takes a number >= 0"),
        ("steps", "option 'steps': write it as KEY=VALUE"),
        ("dit=/no/such/dit.safetensors", "option dit takes shipped or a weights file that exists"),
        ("codec=fast", "option codec takes slim or full or a weights file that exists, not 'fast'"),
        ("codec=shipped", "option codec takes slim or full or a weights file that exists, not 'shipped'"),
        ("upsample=nearest", "option upsample takes parity or transposed, not 'nearest'"),
        ("kernels=fast", "option kernels takes auto or torch or onednn, not 'fast'"),
    ],
)
def test_a_bad_option_names_the_key_and_what_it_takes(item: str, says: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_options([item])
    assert says in str(err.value)


def test_an_option_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="'steps' is given twice"):
        parse_options(["steps=1", "steps=2"])


def _frames(gen: Generator, noise: float | None, seed: int = 3) -> np.ndarray:
    if noise is None:  # the default, as every live session opens
        session = gen.open_session(identity=1, seed=seed)
    else:
        session = gen.open_session(identity=1, seed=seed, cache_noise=noise)
    return np.stack([session.step(ChunkCondition(a)) for a in ("wave", "walk_left", "nod", "idle")])


def test_a_damaged_cache_repeats_itself_and_is_off_unless_asked_for(tiny_generator: Generator) -> None:
    sound = _frames(tiny_generator, None)
    assert np.array_equal(_frames(tiny_generator, 0.0), sound)
    damaged = _frames(tiny_generator, 2.0)
    assert np.array_equal(_frames(tiny_generator, 2.0), damaged)  # seeded per (seed, chunk)
    assert np.array_equal(damaged[0], sound[0])  # the first chunk reads only the reference
    assert not np.array_equal(damaged[1:], sound[1:])
    with pytest.raises(ValueError, match="cache_noise"):
        tiny_generator.open_session(identity=1, cache_noise=-0.1)
