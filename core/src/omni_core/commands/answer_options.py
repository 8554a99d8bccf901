"""``omni serve``'s answer flags: what chat and speech answers hold when the request does not
say, documented in sdk-docs/docs/chat.md and sdk-docs/docs/speech.md."""

from __future__ import annotations

import functools
from typing import Any

import click


def answer_options(func: Any) -> Any:
    """``--chat-modalities`` and ``--speech-format``; the command receives them in one
    ``answers`` keyword: the :class:`~omni_core.serving.config.ServerConfig` fields they set."""

    @functools.wraps(func)
    def wrapper(*args: Any, chat_modalities: str, speech_format: str, **kwargs: Any) -> Any:
        answers = {"chat_modalities": chat_modalities, "speech_format": speech_format}
        return func(*args, answers=answers, **kwargs)

    wrapper = click.option(
        "--speech-format",
        type=click.Choice(["wav", "mp3", "flac", "pcm"]),
        default="wav",
        show_default=True,
        help="The audio format of /v1/audio/speech answers whose request names no "
        "response_format: wav (vLLM-Omni's default) or mp3 (OpenAI's), flac, pcm.",
    )(wrapper)
    return click.option(
        "--chat-modalities",
        type=click.Choice(["model", "text"]),
        default="model",
        show_default=True,
        help="A chat request that names no modalities and no audio gets: 'model', all an omni "
        "model answers with (text and speech, vLLM-Omni's default), or 'text' (OpenAI's).",
    )(wrapper)
