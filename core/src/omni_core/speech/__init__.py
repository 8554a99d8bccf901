"""The speech lane: text in, audio deltas out, streamed as they are made.

A speech plugin subclasses :class:`StreamingSpeechPipeline` (a model that synthesises chunk by
chunk: the base checks the request and resamples / changes speed on the way out) or
:class:`AutoregressiveSpeechPipeline` (a chain of stages: a :class:`DecoderStage` with a
runtime-owned KV cache, :class:`FrameStage` objects, a :class:`ChunkDecoder` codec; the
:class:`ARRuntime` batches every request's decode steps and streams :class:`AudioChunk`
deltas). Voices (:class:`Voice`), cloning (:class:`ReferenceVoice`, :class:`PreparedVoice`),
:func:`split_sentences`, :func:`resample` and :func:`resolve_speech_model` are here too.
Inside: ``pipeline`` (the bases), ``autoregressive``, ``voices`` (uploaded voices), ``lookup``.
"""

from omni_core.contract.faces import Face

_face = Face(
    __name__,
    {
        "omni_core.speech.pipeline": (
            "SpeechPipeline",
            "StreamingSpeechPipeline",
            "split_sentences",
        ),
        "omni_core.speech.autoregressive": ("AutoregressiveSpeechPipeline",),
        "omni_core.speech.lookup": ("resolve_speech_model",),
        "omni_core.contract.types": ("AudioChunk", "Voice", "ReferenceVoice", "PreparedVoice"),
        "omni_core.runtime.chain": ("ARRuntime", "SpeechStream"),
        "omni_core.runtime.stages": (
            "ARState",
            "StepOutput",
            "DecoderStage",
            "FrameStage",
            "ChunkDecoder",
            "ChunkSchedule",
            "SpeechStages",
        ),
        "omni_core.media.dsp": ("resample",),
    },
)
__getattr__, __dir__, __all__ = _face.getattr, _face.dir, _face.names
