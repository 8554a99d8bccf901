"""The HTTP routes, one module per resource: images, videos, speech, and the system routes
(models, health, metrics). Each module's ``add_routes(router, state)`` registers its routes."""
