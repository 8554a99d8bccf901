"""``omni serve``'s answer flags: what chat answers hold when the request does not say,
documented in sdk-docs/docs/chat.md."""

from __future__ import annotations

import functools
from typing import Any

import click


def answer_options(func: Any) -> Any:
    """``--chat-modalities``; the command receives it in one ``answers`` keyword: the
    :class:`~omni_core.serving.config.ServerConfig` fields it sets."""

    @functools.wraps(func)
    def wrapper(*args: Any, chat_modalities: str, **kwargs: Any) -> Any:
        return func(*args, answers={"chat_modalities": chat_modalities}, **kwargs)

    return click.option(
        "--chat-modalities",
        type=click.Choice(["model", "text"]),
        default="model",
        show_default=True,
        help="A chat request that names no modalities and no audio gets: 'model', all an omni "
        "model answers with (text and speech, vLLM-Omni's default), or 'text' (OpenAI's).",
    )(wrapper)
