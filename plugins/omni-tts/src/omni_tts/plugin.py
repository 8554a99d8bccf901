"""omni plugin entry point of omni-tts: registers the speech pipelines (lazily, no torch here)."""

from __future__ import annotations

from collections.abc import Callable

from omni_core import PLUGIN_API_VERSION, PipelineCapabilities, PipelineSpec, hookimpl

OMNI_PLUGIN_API = PLUGIN_API_VERSION

_STREAMING = PipelineCapabilities(streaming=True)

SPECS: tuple[PipelineSpec, ...] = (
    PipelineSpec(
        name="piper",
        tasks=("tts",),
        architectures=("PiperVoice",),
        implementation="omni_tts.piper:PiperPipeline",
        extras="omni_tts.piper:PiperExtras",
        capabilities=_STREAMING,
        default_model="piper",
        description="Piper ONNX voices (a folder of .onnx + .onnx.json, or model id 'piper' "
        "for the installed default voice); needs omni-tts[piper] (GPL)",
    ),
    PipelineSpec(
        name="vits",
        tasks=("tts",),
        architectures=("VitsModel",),
        implementation="omni_tts.vits:VitsPipeline",
        extras="omni_tts.vits:VitsExtras",
        capabilities=_STREAMING,
        description="transformers VITS / MMS-TTS; streams per sentence",
    ),
    PipelineSpec(
        name="speecht5",
        tasks=("tts",),
        architectures=("SpeechT5ForTextToSpeech",),
        implementation="omni_tts.speecht5:SpeechT5Pipeline",
        extras="omni_tts.speecht5:SpeechT5Extras",
        capabilities=_STREAMING,
        description="transformers SpeechT5 + HiFi-GAN vocoder, built-in speaker embeddings",
    ),
    PipelineSpec(
        name="fastspeech2-conformer",
        tasks=("tts",),
        architectures=("FastSpeech2ConformerModel", "FastSpeech2ConformerWithHifiGan"),
        implementation="omni_tts.fastspeech2:FastSpeech2Pipeline",
        extras="omni_tts.fastspeech2:FastSpeech2Extras",
        capabilities=_STREAMING,
        description="transformers FastSpeech2Conformer + HiFi-GAN; streams per sentence",
    ),
    PipelineSpec(
        name="csm",
        tasks=("tts",),
        architectures=("CsmForConditionalGeneration",),
        implementation="omni_tts.csm:CsmPipeline",
        extras="omni_tts.csm:CsmExtras",
        capabilities=_STREAMING,
        description="transformers CSM (autoregressive Mimi-codec model); streams audio every "
        "few frames while it generates",
    ),
)


@hookimpl
def omni_register_pipelines(register: Callable[[PipelineSpec], None]) -> None:
    for spec in SPECS:
        register(spec)
