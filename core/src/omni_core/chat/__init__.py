"""Chat: conversations in, text and speech out (:mod:`omni_core.chat.types` for what requests
carry and answers stream, :mod:`omni_core.chat.pipeline` for the pipeline contract). Importing
it imports neither torch nor transformers."""
