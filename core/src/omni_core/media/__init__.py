"""Media: what turns arrays into files and back, and streamed signal processing.

- :mod:`omni_core.media.visual`: PNG through Pillow, MP4 (H.264) through PyAV;
- :mod:`omni_core.media.audio`: wav / pcm / flac / mp3, whole-file and streamed encoders,
  decoding, duration, atomic writes;
- :mod:`omni_core.media.dsp`: resampling and speed changes that keep the pitch (streamed).

Used by the lanes (the speech chain resamples its output) and the shells (the server and the
CLI encode). None of these modules imports numpy, PyAV or torch at import time.
"""
