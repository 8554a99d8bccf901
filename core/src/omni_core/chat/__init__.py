"""The chat lane: conversations in, text (and speech, from omni models) out.

A chat plugin subclasses :class:`AutoregressiveChatPipeline` and writes stages: a :class:`TextStage`
(the model that writes the answer) and, for spoken answers, a :class:`SpeechFollower` (the speech
chain, reading what the text stage wrote from a :class:`ReplyBuffer`). The :class:`ChatRuntime`
batches every answer's decode steps and streams :class:`ChatDelta` objects. Requests carry
:class:`ChatMessage` turns of decoded :class:`ChatPart` items; :func:`chat_request` builds one (what
``Omni(...).chat(...)``, ``omni generate chat`` and the server use). Inside: ``pipeline``,
``stages``, ``runtime``, ``api``.
"""

from omni_core.contract.faces import Face

_face = Face(
    __name__,
    {
        "omni_core.chat.pipeline": ("ChatPipeline", "AutoregressiveChatPipeline"),
        "omni_core.chat.stages": (
            "TextStage",
            "TextState",
            "TextStages",
            "TokenOutput",
            "ReplyBuffer",
            "SpeechFollower",
        ),
        "omni_core.chat.runtime": ("ChatRuntime", "ChatStream"),
        "omni_core.chat.api": ("chat_request", "as_messages"),
        "omni_core.contract.messages": ("ChatMessage", "ChatPart", "ChatDelta", "ChatUsage"),
    },
)
__getattr__, __dir__, __all__ = _face.getattr, _face.dir, _face.names
