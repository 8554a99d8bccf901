"""The speech runtime, cut by job: signal processing, codecs and the speech pipeline base.

- :mod:`omni_core.audio.dsp`: resampling and speed changes that keep the pitch (streamed).
- :mod:`omni_core.audio.codecs`: wav / pcm / flac / mp3, whole-file and streamed encoders,
  decoding, duration, atomic writes.
- :mod:`omni_core.audio.speech`: :class:`StreamingSpeechPipeline` (request checks + streaming
  post-processing around a model), :func:`split_sentences`, :func:`resolve_speech_model`.

Plugin authors reach the speech base through ``omni_core`` (``omni_core.StreamingSpeechPipeline``,
``omni_core.split_sentences``). The names below are re-exported for the core's own modules
(the CLI, the server), so ``from omni_core import audio; audio.encode_audio(...)`` works. None
of these modules imports numpy, PyAV or torch at import time.
"""

from __future__ import annotations

from omni_core.audio.codecs import (
    FORMATS,
    MEDIA_TYPES,
    MP3_SAMPLE_RATES,
    SAMPLE_RATES,
    StreamEncoder,
    check_format,
    check_sample_rate,
    decode_audio,
    duration_s,
    encode_audio,
    format_for_path,
    publish_file,
    to_int16,
    write_audio,
    write_bytes_atomic,
)
from omni_core.audio.dsp import (
    SpeechPostprocessor,
    StreamingResampler,
    StreamingTempo,
    change_speed,
    resample,
)
from omni_core.audio.speech import (
    MAX_TEXT_CHARS,
    StreamingSpeechPipeline,
    check_text,
    check_voice,
    default_speech_spec,
    resolve_speech_model,
    split_sentences,
)

__all__ = [
    "FORMATS",
    "MAX_TEXT_CHARS",
    "MEDIA_TYPES",
    "MP3_SAMPLE_RATES",
    "SAMPLE_RATES",
    "SpeechPostprocessor",
    "StreamEncoder",
    "StreamingResampler",
    "StreamingSpeechPipeline",
    "StreamingTempo",
    "change_speed",
    "check_format",
    "check_sample_rate",
    "check_text",
    "check_voice",
    "decode_audio",
    "default_speech_spec",
    "duration_s",
    "encode_audio",
    "format_for_path",
    "publish_file",
    "resample",
    "resolve_speech_model",
    "split_sentences",
    "to_int16",
    "write_audio",
    "write_bytes_atomic",
]
