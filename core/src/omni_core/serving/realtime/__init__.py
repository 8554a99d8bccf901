"""``/v1/realtime``: spoken conversations with chat models over OpenAI's Realtime API.

Cut by job: ``events`` (the GA event and session shapes, the ``error`` event), ``session``
(one session's conversation, input buffer and limits), ``vad`` (server VAD: Silero),
``respond`` (one answer through the chat contract), ``connection`` (the client events'
handlers), ``route`` (the WebSocket and its checks).
"""
