"""The HTTP routes, one module per resource: images, videos, speech, chat (image models through
OpenAI's chat API), and the system routes (models, health, metrics). Each module's
``add_routes(router, state)`` registers its routes."""
