"""What one served model accepts, found by asking it: the candidate values of a field are tried
through ``ServerState.build_request`` (the schema, the pipeline's ``validate``, the operator
limits: the path every request takes), and only those it takes are kept. The published OpenAPI
bodies (:mod:`omni_core.serving.openapi_bodies`) are built from the answers, so a body the
document allows is a body the server accepts.

Only declared members of the pipeline are used (``validate`` through ``build_request``,
``extras_model``, ``voices``, ``speakable``, ``adapters``): the probes know no model family.
Every probe is a validation, never a generation: the whole document costs milliseconds per
model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from omni_core.contract.types import GenerationRequest
from omni_core.serving import compat
from omni_core.serving.errors import APIError

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.serving.models import ServedModel
    from omni_core.serving.state import ServerState

#: Error params that mean "the size" (the pipeline's own checks name width or height).
SIZE_PARAMS = frozenset({"size", "width", "height"})
#: The clip lengths (``seconds``) a video body may publish, where the model takes them.
SECONDS = ("1", "2", "3", "4", "5", "6", "8", "10", "12", "15", "20", "30", "60")
#: Most sizes one model's ``size`` enum lists (squares and common ratios, spread out).
MAX_SIZES = 48
#: Aspect ratios tried beside squares (both orientations).
RATIOS = ((4, 3), (3, 2), (16, 9), (2, 1))


def probe_image(side: int = 32) -> Any:
    """A small RGB image for probes of models that take (or need) input images."""
    from PIL import Image

    return Image.new("RGB", (side, side), (127, 127, 127))


class Probe:
    """Asks one served model whether it takes a request (``fields`` are shared request fields,
    ``extras`` the pipeline's), through the path every request of the server takes."""

    def __init__(self, state: ServerState, served: ServedModel, *, images: int = 0) -> None:
        self.state = state
        self.served = served
        self.images = [probe_image() for _ in range(images)]

    @property
    def pipeline(self) -> Any:
        return self.served.pipeline

    def build(
        self,
        fields: Mapping[str, Any],
        extras: Mapping[str, Any] | None = None,
        seconds: float | None = None,
    ) -> GenerationRequest | APIError:
        values = dict(fields)
        if self.images:
            values["images"] = list(self.images)
        try:
            return self.state.build_request(
                self.served, values, extras=dict(extras or {}), request_id="probe", seconds=seconds
            )
        except APIError as exc:
            return exc
        except Exception as exc:  # noqa: BLE001 - a probe the pipeline fails on is a refusal
            return APIError(500, f"{type(exc).__name__}: {exc}")

    def error(self, *args: Any, **kwargs: Any) -> APIError | None:
        built = self.build(*args, **kwargs)
        return built if isinstance(built, APIError) else None

    def ok(self, *args: Any, **kwargs: Any) -> bool:
        return self.error(*args, **kwargs) is None

    def fits(self, param_names: Iterable[str], *args: Any, **kwargs: Any) -> bool:
        """Whether nothing about ``param_names`` is refused (other fields may still be)."""
        err = self.error(*args, **kwargs)
        return err is None or err.param not in set(param_names)


def bounds(
    ok: Callable[[float], bool],
    lo: float,
    hi: float,
    known: float,
    *,
    integer: bool,
    steps: int = 24,
) -> tuple[float, float] | None:
    """The accepted range within ``[lo, hi]`` around ``known`` (a value taken), assuming the
    accepted values are one interval; None when ``known`` is not taken."""
    if not ok(known):
        return None

    def edge(good: float, bad: float) -> float:
        for _ in range(steps):
            if integer and abs(bad - good) <= 1:
                break
            mid = (good + bad) / 2
            mid = round(mid) if integer else mid
            if mid in (good, bad):
                break
            good, bad = (mid, bad) if ok(mid) else (good, mid)
        return good

    low = lo if ok(lo) else edge(known, lo)
    high = hi if ok(hi) else edge(known, hi)
    if not integer:  # an interior edge found by halving: round it inwards, two decimals
        low = low if low == lo else math.ceil(low * 100) / 100
        high = high if high == hi else math.floor(high * 100) / 100
    return low, high


def contiguous(values: list[int]) -> dict[str, Any]:
    """Integers as a JSON schema: a range when they are one, else an enum."""
    if values == list(range(values[0], values[-1] + 1)):
        return {"type": "integer", "minimum": values[0], "maximum": values[-1]}
    return {"type": "integer", "enum": values}


def sizes(probe: Probe, base: Mapping[str, Any], max_pixels: int | None) -> list[tuple[int, int]]:
    """The sizes the model takes with ``base``: squares in steps of 8 up to the pixel limit,
    then common ratios at the sides it took, and its default size; at most :data:`MAX_SIZES`."""
    top = min(2048, math.isqrt(max_pixels) if max_pixels else 2048)
    sides = [
        s
        for s in range(8, top + 1, 8)
        if probe.fits(SIZE_PARAMS, {**base, "width": s, "height": s})
    ]
    if not sides:
        return []
    step = math.gcd(*sides)
    found = {(s, s) for s in sides}
    for side in _spread(sides, 8):
        for a, b in RATIOS:
            other = max(step, round(side * a / b / step) * step)
            for w, h in ((other, side), (side, other)):
                if probe.fits(SIZE_PARAMS, {**base, "width": w, "height": h}):
                    found.add((w, h))
    default = probe.build(base)
    if isinstance(default, GenerationRequest) and default.width and default.height:
        found.add((default.width, default.height))
    ordered = sorted(found, key=lambda wh: (wh[0] * wh[1], wh))
    return _spread(ordered, MAX_SIZES)


def _spread(items: list[Any], most: int) -> list[Any]:
    """At most ``most`` of ``items``, evenly spread, the first and last kept."""
    if len(items) <= most:
        return list(items)
    picks = {round(i * (len(items) - 1) / (most - 1)) for i in range(most)}
    return [items[i] for i in sorted(picks)]


def frames(probe: Probe, base: Mapping[str, Any], most: int) -> list[int]:
    """The frame counts the video route takes with ``base`` (after it fits a count to the
    nearest one the model makes, as :func:`omni_core.serving.compat.fit_frames` does)."""
    taken = []
    for count in range(1, most + 1):
        fields = {**base, "num_frames": count, "images": probe.images}
        fitted = compat.fit_frames(probe.pipeline, fields, {})
        if probe.ok({**base, "num_frames": fitted}):
            taken.append(count)
    return taken


def extras(
    probe: Probe, base: Mapping[str, Any], corners: list[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The pipeline's extras the model takes, as published properties: each extra is tried at
    its bounds, enum values and both booleans, alone and with the shared fields at their
    extremes (``corners``: an alias of a shared field disagreeing with it is a 400); an extra
    refused at any of them is left out (the schema stays a subset of what is accepted)."""
    schema = probe.pipeline.extras_model.model_json_schema()
    out: dict[str, dict[str, Any]] = {}
    for name, prop in schema.get("properties", {}).items():
        if "$ref" in repr(prop):
            continue  # nested models: not published (they stay accepted as sent)
        plain = non_null(prop)
        values = list(samples(plain))
        if values and all(
            probe.ok(fields, {name: value}) for value in values for fields in [base, *corners]
        ):
            published = {k: v for k, v in plain.items() if k not in ("title", "default")}
            out[name] = published
    return out


def non_null(prop: dict[str, Any]) -> dict[str, Any]:
    """An optional property's schema without its ``null`` branch (``anyOf: [X, null]`` -> X)."""
    options = [o for o in prop.get("anyOf", []) if o.get("type") != "null"]
    if len(options) == 1:
        merged = {k: v for k, v in prop.items() if k != "anyOf"}
        merged.update(options[0])
        return merged
    return dict(prop)


def samples(prop: dict[str, Any]) -> Iterable[Any]:
    """The values a property is tried at: its enum, both booleans, its numeric bounds (inside
    exclusive ones) and default; nothing for a type without bounds to try (strings)."""
    if "enum" in prop:
        yield from prop["enum"]
        return
    if "const" in prop:
        yield prop["const"]
        return
    kind = prop.get("type")
    if kind == "boolean":
        yield from (True, False)
    elif kind in ("integer", "number"):
        tiny = 1 if kind == "integer" else 1e-3
        low = prop.get("minimum", prop.get("exclusiveMinimum", None))
        if "exclusiveMinimum" in prop:
            low = prop["exclusiveMinimum"] + tiny
        high = prop.get("maximum", None)
        if "exclusiveMaximum" in prop:
            high = prop["exclusiveMaximum"] - tiny
        for value in (low, high, prop.get("default")):
            if value is not None:
                yield value
        if low is None and high is None and prop.get("default") is None:
            yield 1
    elif kind == "string" and prop.get("default") is not None:
        yield prop["default"]


def speakable_char(pattern: str | None) -> str:
    """A character the voice says (``"a"`` for a voice that says any text)."""
    if pattern is None:
        return "a"
    for point in range(33, 0x3000):
        if re.fullmatch(pattern, chr(point)):
            return chr(point)
    return "a"
