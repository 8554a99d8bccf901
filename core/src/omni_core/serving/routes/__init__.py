"""The HTTP routes, in folders that mirror the lanes, one module per resource:

- :mod:`.diffusion` — ``/v1/images`` (:mod:`.diffusion.images`), ``/v1/videos``
  (:mod:`.diffusion.videos`) and image models' answers to OpenAI's chat API
  (:mod:`.diffusion.image_chat`, vLLM-Omni's text-to-image path);
- :mod:`.speech` — ``/v1/audio/speech`` (:mod:`.speech.speech`) and ``/v1/audio/voices``
  (:mod:`.speech.voices`);
- :mod:`.chat` — ``POST /v1/chat/completions`` (:mod:`.chat.completions`: the served model
  decides who answers) and chat models' answers (:mod:`.chat.answers`);
- :mod:`.system` — ``/v1/models``, ``/health`` and ``/metrics``.

A module that registers routes has ``add_routes(router, state)``; the answer modules
(:mod:`.diffusion.image_chat`, :mod:`.chat.answers`) have ``answer(state, served, data,
request)`` for the one route that hands them a body."""
