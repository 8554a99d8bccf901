"""Schemathesis hooks for omni's OpenAPI document: real images where the document says one.

The document publishes uploads as parts of a declared image type (``encoding.contentType``) and
image data URLs as strings of ``format: image-data-url``; JSON Schema cannot say "a decodable
PNG", so these strategies make them: small PNGs (sides 1-32 pixels, within the test servers'
``--max-pixels``, as the document's descriptions ask of uploads). Loaded by the schemathesis CLI
through ``SCHEMATHESIS_HOOKS=schema_hooks`` (``tests/serving`` on ``PYTHONPATH``).
"""

from __future__ import annotations

import base64
import io

import schemathesis
from hypothesis import strategies as st


def _png(size: tuple[int, int], shade: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, (shade, 255 - shade, 128)).save(buffer, format="PNG")
    return buffer.getvalue()


PNGS = st.builds(
    _png,
    st.tuples(st.integers(1, 32), st.integers(1, 32)),
    st.integers(0, 255),
)
DATA_URLS = PNGS.map(lambda data: "data:image/png;base64," + base64.b64encode(data).decode())

schemathesis.openapi.media_type("image/png", PNGS)
schemathesis.openapi.format("image-data-url", DATA_URLS)


def _wav(seconds: float, hertz: int) -> bytes:
    import numpy as np
    import soundfile

    rate = 16000
    t = np.arange(int(seconds * rate)) / rate
    buffer = io.BytesIO()
    soundfile.write(buffer, 0.3 * np.sin(2 * np.pi * hertz * t), rate, format="WAV")
    return buffer.getvalue()


#: Reference recordings for voice uploads (the document asks for 0.5-60 s).
WAVS = st.builds(_wav, st.floats(0.6, 3.0), st.integers(100, 400))
schemathesis.openapi.media_type("audio/wav", WAVS)


@schemathesis.hook
def filter_failure(context, failure, case, response) -> bool:
    """Keep every failure but one schemathesis makes up: its coverage phase sends a form with
    a custom-encoded part (an image) with every other required field set to ``""``
    (``coverage._operation._generate_multipart_body_from_custom_strategies``) and calls the
    case positive, though ``""`` breaks the schema (an enum, a pattern). A rejected "positive"
    form is kept only when its text fields really are valid against the published schema."""
    from schemathesis.core.jsonschema import make_validator_for
    from schemathesis.openapi.checks import RejectedPositiveData

    if not isinstance(failure, RejectedPositiveData) or not isinstance(case.body, dict):
        return True
    phase = getattr(getattr(case.meta, "phase", None), "name", None)
    if case.media_type != "multipart/form-data" or phase != "coverage":
        return True
    body = case.operation.get_body_for_media_type(case.media_type)
    text = {k: v for k, v in case.body.items() if isinstance(v, str | int | float | bool)}
    parts = {k: "" for k in case.body if k not in text}  # the encoded (binary) parts
    return make_validator_for(body.validation_schema).is_valid({**text, **parts})
