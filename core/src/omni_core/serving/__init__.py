"""The OpenAI-compatible server behind ``omni serve`` (FastAPI on uvicorn), for deployment
plugins (omni-ray runs it inside each replica). Nothing is imported until a name is used, so
``omni bench serve`` (a client) does not import the server and the configs import no FastAPI.
"""

from omni_core.contract.faces import Face

_face = Face(
    __name__,
    {
        "omni_core.serving.config": ("ServerConfig", "ModelSource"),
        "omni_core.serving.stores.config": ("StorageConfig", "RetentionPolicy"),
        "omni_core.serving.app": ("create_app",),
    },
)
__getattr__, __dir__, __all__ = _face.getattr, _face.dir, _face.names
