"""The routes of the speech lane: speech synthesis and the voices (listed and uploaded)."""
