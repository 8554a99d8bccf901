"""How a package shows its public names: a *face*, each name listed once, resolved on first use.

A face (``omni_core``, ``omni_core.diffusion``, ``omni_core.speech``, ...) is a package
``__init__`` that lists its names by the module that defines them::

    _face = Face(__name__, {"omni_core.speech.pipeline": ("SpeechPipeline", "split_sentences")})
    __getattr__, __dir__, __all__ = _face.getattr, _face.dir, _face.names

Nothing is imported until a name is used, so importing a face stays cheap (no torch, no
pydantic) and ``omni --help`` stays fast. ``__all__`` is derived from the table, so a name is
typed once; the contract tests check that every name resolves, that it is the object's own
name, and that no name is in two faces.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


class Face:
    """The lazy public names of one package (module doc)."""

    def __init__(self, package: str, table: Mapping[str, tuple[str, ...]]) -> None:
        self.package = package
        self.where: dict[str, str] = {}
        for module, names in table.items():
            for name in names:
                if name in self.where:
                    raise ValueError(f"{package}: {name!r} is listed twice")
                self.where[name] = module
        #: The public names (the package's ``__all__``), sorted.
        self.names: list[str] = sorted(self.where)

    def resolve(self, name: str) -> Any:
        """The object ``name`` stands for, imported from its module (cached by the caller)."""
        module = self.where.get(name)
        if module is None:
            raise AttributeError(f"module {self.package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        import_module(self.package).__dict__[name] = value
        return value

    @property
    def getattr(self) -> Callable[[str], Any]:
        return self.resolve

    def dir(self) -> list[str]:
        return list(self.names)
