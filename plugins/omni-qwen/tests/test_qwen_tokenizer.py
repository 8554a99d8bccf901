"""The tiny tokenizer must split Qwen-Image's system prefixes exactly as the real one does."""

from __future__ import annotations

from omni_qwen import pipelines
from omni_qwen.testing import qwen_image as testing


def test_system_prefix_is_exactly_34_tokens() -> None:
    tokenizer = testing.build_tokenizer()
    ids = tokenizer(testing.T2I_PREFIX).input_ids
    assert len(ids) == testing.T2I_PREFIX_TOKENS == 34
    # The prefix is what the template puts before the user's prompt, and what gets dropped.
    assert pipelines.T2I_TEMPLATE.startswith(testing.T2I_PREFIX)
    assert pipelines.QwenImagePipeline.drop_tokens == 34
    # A prompt's own tokens start right after the dropped prefix.
    full = tokenizer(pipelines.T2I_TEMPLATE.format("a red cat")).input_ids
    assert full[:34] == ids and len(full) > 34


def test_edit_system_prefix_is_exactly_64_tokens() -> None:
    tokenizer = testing.build_tokenizer()
    assert len(tokenizer(testing.EDIT_PREFIX).input_ids) == testing.EDIT_PREFIX_TOKENS == 64
    assert pipelines.EDIT_TEMPLATE.startswith(testing.EDIT_PREFIX)
    assert pipelines.EDIT_PLUS_TEMPLATE.startswith(testing.EDIT_PREFIX)
    assert pipelines.QwenImageEditPipeline.drop_tokens == 64
    assert pipelines.QwenImageEditPlusPipeline.drop_tokens == 64


def test_special_tokens_are_single_tokens() -> None:
    tokenizer = testing.build_tokenizer()
    for token in testing.SPECIAL_TOKENS:
        assert len(tokenizer(token).input_ids) == 1, token


def test_builder_is_deterministic(tmp_path) -> None:
    a = testing.build_tiny_qwen_image(tmp_path / "a", "t2i")
    b = testing.build_tiny_qwen_image(tmp_path / "b", "t2i")
    for part in (
        "transformer/diffusion_pytorch_model.safetensors",
        "text_encoder/model.safetensors",
        "vae/diffusion_pytorch_model.safetensors",
    ):
        assert (a / part).read_bytes() == (b / part).read_bytes(), part
