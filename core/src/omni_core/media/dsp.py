"""Signal processing for speech output: resampling and speed changes that keep the pitch.

- :func:`resample` / :class:`StreamingResampler`: a windowed-sinc polyphase resampler in numpy
  (no extra dependency). Streaming it chunk by chunk gives exactly the one-shot output.
- :func:`change_speed` / :class:`StreamingTempo`: time-stretch without a pitch change through
  FFmpeg's ``atempo`` filter (PyAV, BSD; FFmpeg LGPL build). Pipelines whose model can scale
  durations itself (VITS, Piper) set ``native_speed = True`` and do it at the source instead.
- :class:`SpeechPostprocessor`: the per-request chain of both, as the speech base runs it.

numpy and PyAV are imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from omni_core.contract.errors import InvalidRequestError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

#: Output samples computed per vectorised block by the resampler (bounds its temporary memory).
_RESAMPLE_BLOCK = 8192


# --------------------------------------------------------------------------------- resampling
@lru_cache(maxsize=32)
def _polyphase_filter(up: int, down: int, half_width: int = 16, beta: float = 5.0) -> Any:
    """Kaiser-windowed sinc low-pass for rational resampling, reshaped per phase."""
    import numpy as np

    factor = max(up, down)
    taps = 2 * half_width * factor + 1
    center = (taps - 1) / 2
    n = np.arange(taps, dtype=np.float64)
    cutoff = 1.0 / factor
    h = cutoff * np.sinc(cutoff * (n - center)) * np.kaiser(taps, beta) * up
    k = -(-taps // up)  # taps per phase
    padded = np.zeros(k * up, dtype=np.float64)
    padded[:taps] = h
    # phases[p, i] = h[p + i * up]
    phases = padded.reshape(k, up).T.copy()
    return phases, int(center), k


def _ratio(orig_sr: int, target_sr: int) -> tuple[int, int]:
    frac = Fraction(int(target_sr), int(orig_sr))
    return frac.numerator, frac.denominator


class StreamingResampler:
    """Resample chunk by chunk; concatenated outputs equal :func:`resample` on the whole signal.

    Output sample ``m`` sits at input time ``m * orig / target``; it is emitted once the input
    samples its filter needs have arrived (a lookahead of ~16 input samples), and :meth:`flush`
    finishes the tail against zeros, exactly as the one-shot form does.
    """

    def __init__(self, orig_sr: int, target_sr: int) -> None:
        import numpy as np

        self.orig_sr, self.target_sr = int(orig_sr), int(target_sr)
        self.up, self.down = _ratio(self.orig_sr, self.target_sr)
        self.identity = self.up == self.down
        if not self.identity:
            self.phases, self.delay, self.k = _polyphase_filter(self.up, self.down)
        self._buffer = np.zeros(0, dtype=np.float64)
        self._offset = 0  # input index of _buffer[0]
        self._received = 0
        self._next_out = 0

    def _emit(self, stop: int, *, final: bool) -> np.ndarray:
        import numpy as np

        blocks = [
            self._block(lo, min(lo + _RESAMPLE_BLOCK, stop))
            for lo in range(self._next_out, stop, _RESAMPLE_BLOCK)
        ]
        self._next_out = max(stop, self._next_out)
        # Drop input no future output needs.
        if not final:
            oldest_needed = (stop * self.down + self.delay) // self.up - self.k + 1
            drop = max(0, min(oldest_needed - self._offset, len(self._buffer)))
            if drop:
                self._buffer = self._buffer[drop:]
                self._offset += drop
        if not blocks:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(blocks).astype(np.float32)

    def _block(self, start: int, stop: int) -> np.ndarray:
        """Outputs ``start .. stop-1`` (a bounded block: memory is block x taps-per-phase)."""
        import numpy as np

        m = np.arange(start, stop, dtype=np.int64)
        u = m * self.down + self.delay
        phase = u % self.up
        idx = (u // self.up)[:, None] - np.arange(self.k, dtype=np.int64)[None, :]
        valid = (idx >= 0) & (idx < self._received)
        if len(self._buffer):
            local = np.clip(idx - self._offset, 0, len(self._buffer) - 1)
            values = np.where(valid, self._buffer[local], 0.0)
        else:
            values = np.zeros(idx.shape)
        return (values * self.phases[phase]).sum(axis=1)

    def process(self, samples: np.ndarray) -> np.ndarray:
        """Feed input samples; returns the output samples that are now complete."""
        import numpy as np

        x = np.asarray(samples, dtype=np.float32).reshape(-1)
        if self.identity:
            return x.copy()
        self._buffer = np.concatenate([self._buffer, x.astype(np.float64)])
        self._received += len(x)
        # Output m is complete when its newest input index < received.
        ready = (self._received * self.up - 1 - self.delay) // self.down + 1
        ready = max(ready, self._next_out)
        return self._emit(ready, final=False)

    def flush(self) -> np.ndarray:
        """The remaining output (the tail, filtered against zeros after the end)."""
        import numpy as np

        if self.identity:
            return np.zeros(0, dtype=np.float32)
        total = -(-self._received * self.up // self.down)
        return self._emit(max(total, self._next_out), final=True)


def resample(samples: np.ndarray, orig_sr: int, target_sr: int) -> np.ndarray:
    """Resample float mono PCM from ``orig_sr`` to ``target_sr`` (length ``ceil(n*t/o)``)."""
    import numpy as np

    r = StreamingResampler(orig_sr, target_sr)
    return np.concatenate([r.process(samples), r.flush()])


# --------------------------------------------------------------------------------- speed
def _tempo_factors(speed: float) -> list[float]:
    """atempo accepts 0.5..100 per instance: chain instances for slower speeds."""
    factors: list[float] = []
    while speed < 0.5:
        factors.append(0.5)
        speed /= 0.5
    factors.append(speed)
    return factors


class StreamingTempo:
    """Change speed without changing pitch (FFmpeg ``atempo`` through PyAV), chunk by chunk."""

    def __init__(self, sample_rate: int, speed: float) -> None:
        from av.filter import Graph

        if not 0.25 <= speed <= 4.0:
            raise InvalidRequestError(f"speed: {speed} is outside 0.25..4.0", param="speed")
        self.sample_rate = int(sample_rate)
        self.speed = float(speed)
        self._graph = Graph()
        node = self._source = self._graph.add_abuffer(
            format="flt", sample_rate=self.sample_rate, layout="mono"
        )
        for factor in _tempo_factors(self.speed):
            nxt = self._graph.add("atempo", f"{factor:.6f}")
            node.link_to(nxt)
            node = nxt
        sink = self._graph.add("abuffersink")
        node.link_to(sink)
        self._graph.configure()
        self._pts = 0

    def _pull(self) -> np.ndarray:
        import av
        import numpy as np

        out = []
        while True:
            try:
                frame = self._graph.pull()
            except (av.BlockingIOError, BlockingIOError, av.EOFError):
                break
            out.append(frame.to_ndarray().reshape(-1))
        return np.concatenate(out).astype(np.float32) if out else np.zeros(0, dtype=np.float32)

    def process(self, samples: np.ndarray) -> np.ndarray:
        import av
        import numpy as np

        x = np.ascontiguousarray(np.asarray(samples, dtype=np.float32).reshape(1, -1))
        if x.shape[1] == 0:
            return np.zeros(0, dtype=np.float32)
        frame = av.AudioFrame.from_ndarray(x, format="flt", layout="mono")
        frame.sample_rate = self.sample_rate
        frame.pts = self._pts
        self._pts += x.shape[1]
        self._graph.push(frame)
        return self._pull()

    def flush(self) -> np.ndarray:
        self._graph.push(None)
        return self._pull()


def change_speed(samples: np.ndarray, sample_rate: int, speed: float) -> np.ndarray:
    """Time-stretch by ``speed`` (2.0 = twice as fast) keeping the pitch."""
    import numpy as np

    if speed == 1.0:
        return np.asarray(samples, dtype=np.float32).copy()
    tempo = StreamingTempo(sample_rate, speed)
    return np.concatenate([tempo.process(samples), tempo.flush()])


class SpeechPostprocessor:
    """Per-request chain: speed (unless the model did it) then resampling to the asked rate."""

    def __init__(self, native_sr: int, *, sample_rate: int | None, speed: float) -> None:
        self.native_sr = int(native_sr)
        self.sample_rate = int(sample_rate or native_sr)
        self._tempo = StreamingTempo(self.native_sr, speed) if speed != 1.0 else None
        self._resampler = (
            StreamingResampler(self.native_sr, self.sample_rate)
            if self.sample_rate != self.native_sr
            else None
        )

    def process(self, samples: np.ndarray) -> np.ndarray:
        import numpy as np

        x = np.asarray(samples, dtype=np.float32).reshape(-1)
        if self._tempo is not None:
            x = self._tempo.process(x)
        if self._resampler is not None:
            x = self._resampler.process(x)
        return x

    def flush(self) -> np.ndarray:
        import numpy as np

        x = np.zeros(0, dtype=np.float32)
        if self._tempo is not None:
            x = self._tempo.flush()
        if self._resampler is not None:
            x = np.concatenate([self._resampler.process(x), self._resampler.flush()])
        return x
