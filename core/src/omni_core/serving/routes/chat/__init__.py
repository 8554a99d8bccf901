"""The routes of the chat lane: ``POST /v1/chat/completions`` and chat models' answers."""
