"""What reaches the Qwen-Omni processors (omni/messages.py, shared with Qwen3-Omni), and the
Qwen2.5-Omni checkpoint checks: speakers file, video parts without torchvision."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from omni_core import ConfigError
from omni_core.chat import ChatMessage, ChatPart


def _image():
    from PIL import Image

    return Image.new("RGB", (32, 24), (10, 200, 30))


def test_conversation_and_media_in_placeholder_order() -> None:
    from omni_qwen.omni.messages import to_processor_inputs

    tone = np.sin(np.arange(8000) / 10.0).astype(np.float32)
    frames = np.zeros((4, 28, 28, 3), np.uint8)
    messages = [
        ChatMessage.text("user", "first"),
        ChatMessage.text("assistant", "an earlier answer"),
        ChatMessage(
            role="user",
            parts=[
                ChatPart(kind="audio", audio=tone, sample_rate=8000),
                ChatPart(kind="text", text=""),
                ChatPart(kind="image", image=_image()),
                ChatPart(kind="video", video=frames, fps=4.0),
                ChatPart(kind="text", text="what is it?"),
            ],
        ),
    ]
    inputs = to_processor_inputs(messages, system_prompt="be brief", sampling_rate=16000)
    assert inputs.conversation[0] == {
        "role": "system",
        "content": [{"type": "text", "text": "be brief"}],
    }
    assert [m["role"] for m in inputs.conversation] == ["system", "user", "assistant", "user"]
    assert [c["type"] for c in inputs.conversation[3]["content"]] == [
        "audio",
        "image",
        "video",
        "text",
    ]
    assert len(inputs.audios) == 1 and inputs.audios[0].dtype == np.float32
    assert inputs.audios[0].shape == (16000,)  # resampled 8 kHz -> 16 kHz
    kwargs = inputs.processor_kwargs()
    assert set(kwargs) == {"images", "audio", "videos", "fps"} and kwargs["fps"] == 4.0
    assert inputs.has_media


def test_own_system_message_wins_and_empty_message_keeps_a_text_item() -> None:
    from omni_qwen.omni.messages import to_processor_inputs

    messages = [ChatMessage.text("system", "mine"), ChatMessage(role="user", parts=[])]
    inputs = to_processor_inputs(messages, system_prompt="default")
    assert inputs.conversation == [
        {"role": "system", "content": [{"type": "text", "text": "mine"}]},
        {"role": "user", "content": [{"type": "text", "text": ""}]},
    ]
    assert inputs.processor_kwargs() == {} and not inputs.has_media


def test_speakers_file_missing_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from omni_qwen.omni.qwen25_loading import speakers_file

    with pytest.raises(ConfigError, match=r"spk_dict\.pt is missing"):
        speakers_file(tmp_path)
    (tmp_path / "spk_dict.pt").write_bytes(b"")
    assert speakers_file(tmp_path) == tmp_path / "spk_dict.pt"
    # a Hub snapshot without it (the core fetches no .pt): fetched, here offline -> clear error
    snapshot = tmp_path / "hub" / "models--acme--omni" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ConfigError, match=r"acme/omni: cannot get spk_dict\.pt"):
        speakers_file(snapshot)


def test_tiny_checkpoint_layout_and_processor(tmp_path: Path) -> None:
    import json

    import torch

    from omni_qwen.omni.qwen25_loading import load_processor
    from omni_qwen.testing import build_tiny_qwen25_omni
    from omni_qwen.testing.qwen25_omni import SPEAKERS

    folder = build_tiny_qwen25_omni(tmp_path / "tiny")
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["Qwen2_5OmniForConditionalGeneration"]
    assert {"thinker_config", "talker_config", "token2wav_config"} <= set(config)
    for name in ("model.safetensors", "preprocessor_config.json", "chat_template.jinja"):
        assert (folder / name).is_file(), name
    speakers = torch.load(folder / "spk_dict.pt", weights_only=True)
    assert list(speakers) == list(SPEAKERS)
    assert set(speakers["Chelsie"]) == {"cond", "ref_mel", "bos_token"}
    processor, videos = load_processor(folder)
    assert processor.image_token_id is not None and processor.audio_token_id is not None
    from transformers.utils import is_torchvision_available

    assert videos == is_torchvision_available()
