"""Server VAD: where the speaker starts and stops, from Silero VAD (``pip install
'omni-core[realtime]'``; MIT, its model ships inside the wheel, runs on the CPU in well under a
millisecond per 32 ms window, and is what most open voice stacks use; webrtcvad's GMM was the
other candidate, but it answers yes or no per frame at one of four aggressiveness modes: no
probability to put ``threshold`` on).

The stream is 24 kHz PCM; Silero reads 512-sample windows at 16 kHz, so each 768-sample window
is resampled by interpolation (VAD needs no fidelity). A window whose speech probability reaches
``threshold`` is speech; speech ends after ``silence_duration_ms`` of windows under
``threshold - 0.15`` (Silero's own hysteresis). Positions are samples of the session's stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omni_core.serving.realtime.events import SAMPLE_RATE, EventError

#: Samples of one window at the stream's rate, and what Silero reads (16 kHz).
WINDOW = 768
MODEL_WINDOW = 512
MODEL_RATE = 16000
#: Silero's hysteresis: speech ends under ``threshold - NEG_MARGIN``.
NEG_MARGIN = 0.15


def load_model() -> Any:
    """A fresh Silero model (it keeps per-stream state: one per session)."""
    try:
        import torch

        threads = torch.get_num_threads()
        try:  # importing silero_vad sets torch's threads to 1 for the whole process
            from silero_vad import load_silero_vad
        finally:
            torch.set_num_threads(threads)
    except ImportError:
        raise EventError(
            "server_vad needs Silero VAD on the server: pip install 'omni-core[realtime]' "
            "(or set turn_detection to null and commit the audio yourself)",
            "vad_unavailable",
            "session.audio.input.turn_detection",
        ) from None
    import warnings

    with warnings.catch_warnings():  # its loader uses importlib.resources.path (deprecated)
        warnings.simplefilter("ignore", DeprecationWarning)
        return load_silero_vad()


@dataclass
class Turn:
    """What :meth:`ServerVAD.feed` saw: ``start`` or ``stop`` at a stream sample."""

    kind: str
    sample: int


class ServerVAD:
    """Speech start and stop in a 24 kHz stream fed in pieces of any length."""

    def __init__(self, settings: dict[str, Any], model: Any = None) -> None:
        self.model = model if model is not None else load_model()
        self.configure(settings)
        self.pending: Any = None  # samples not yet in a window
        self.position = 0  # stream samples consumed in windows
        self.speaking = False
        self.start = 0  # where the current speech started
        self.last_speech = 0  # the end of its last speech window

    def configure(self, settings: dict[str, Any]) -> None:
        self.threshold = float(settings["threshold"])
        self.silence = int(settings["silence_duration_ms"] * SAMPLE_RATE / 1000)
        self.padding = int(settings["prefix_padding_ms"] * SAMPLE_RATE / 1000)

    def feed(self, samples: Any) -> list[Turn]:
        """Run the complete windows of ``pending + samples`` (CPU; call it off the loop)."""
        import numpy as np
        import torch

        data = samples if self.pending is None else np.concatenate([self.pending, samples])
        count = len(data) // WINDOW
        self.pending = data[count * WINDOW :]
        turns: list[Turn] = []
        if not count:
            return turns
        at = np.linspace(0, WINDOW - 1, MODEL_WINDOW)
        windows = [
            np.interp(at, np.arange(WINDOW), data[i * WINDOW : (i + 1) * WINDOW])
            for i in range(count)
        ]
        with torch.inference_mode():
            probs = [
                float(self.model(torch.from_numpy(w.astype(np.float32)), MODEL_RATE))
                for w in windows
            ]
        for prob in probs:
            start, self.position = self.position, self.position + WINDOW
            if prob >= self.threshold:
                self.last_speech = self.position
                if not self.speaking:
                    self.speaking, self.start = True, start
                    turns.append(Turn("start", start))
            elif self.speaking and prob < self.threshold - NEG_MARGIN:
                if self.position - self.last_speech >= self.silence:
                    self.speaking = False
                    turns.append(Turn("stop", self.last_speech))
        return turns

    def reset(self, position: int) -> None:
        """Forget the speech in progress (``input_audio_buffer.clear``, a manual commit)."""
        self.speaking = False
        self.model.reset_states()
        self.pending = None
        self.position = position
