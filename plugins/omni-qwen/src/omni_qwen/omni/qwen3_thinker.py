"""Qwen3-Omni's thinker as the chat runtime's text stage (transformers' modules, our loop).

:class:`ThinkerStage` runs ``Qwen3OmniMoeThinkerForConditionalGeneration``'s own modules on
the runtime's slot cache:

- ``prefill``: the prompts of a group (one length) in one forward of the thinker model with
  their media (audio features, images, videos: transformers merges them into the embeddings
  and adds the deepstack features), at the multimodal RoPE positions of ``get_rope_index``;
  each row keeps its RoPE delta (``positions - index``) for the decode steps. For rows that
  asked for audio it also keeps what the talker's prompt is made of: the input embeddings and
  the ``accept_hidden_layer`` hidden states of the user turns, and the embeddings of the
  ``<|im_start|>assistant\\n`` head.
- ``decode``: one token per row through the language model at ``cache position + delta``.

Every decode step returns, as ``follow``, the input embedding of the token it fed (one step
late: ``follow_lag=1``, so the reply buffer stores it at that token's index): what the talker
reads for that token (``text_projection`` is applied on the talker side), the values
``generate()`` collects as ``hidden_states[0]``. Being late, an answer cut by ``max_tokens``
never speaks its last token, exactly as ``generate()`` does (it feeds ``tts_eos`` there).
Sampling is the
core's per-row :func:`~omni_core.runtime.sample_tokens` (greedy at temperature 0, like
``generate(do_sample=False)``). Under ``decode_graphs`` (``on`` / ``static``) the decode step is
:class:`~.qwen3_thinker_graphs.GraphThinkerStage`'s static one, with the same outputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from omni_core.chat import TextStage, TextState, TokenOutput
from omni_core.runtime import sample_tokens

if TYPE_CHECKING:  # pragma: no cover
    from omni_core.runtime import SlotCache

#: The processor outputs the thinker model reads, besides ``input_ids``.
MEDIA_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "input_features",
    "feature_attention_mask",
    "pixel_values_videos",
    "video_grid_thw",
    "video_second_per_grid",
)


def _pad_features(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Audio features (or their masks) of several requests, padded to the longest on the last
    dimension (the feature attention mask marks the padding)."""
    longest = max(t.shape[-1] for t in tensors)
    return torch.cat([torch.nn.functional.pad(t, (0, longest - t.shape[-1])) for t in tensors])


def batch_media(inputs: list[dict[str, torch.Tensor]], device: Any, dtype: Any) -> dict[str, Any]:
    """The media of several requests as one batch for the thinker model (row order)."""
    out: dict[str, Any] = {}
    for key in MEDIA_KEYS:
        parts = [i[key] for i in inputs if key in i]
        if not parts:
            continue
        if key in ("input_features", "feature_attention_mask"):
            value = _pad_features(parts)
        else:
            value = torch.cat(parts)
        value = value.to(device)
        out[key] = (
            value.to(dtype)
            if value.is_floating_point() and key != "video_second_per_grid"
            else value
        )
    return out


class ThinkerStage(TextStage):
    """The thinker of a loaded ``Qwen3OmniMoeForConditionalGeneration`` (module docstring)."""

    def __init__(self, model: Any, stop_ids: list[int], *, follow: bool) -> None:
        self.thinker = model.thinker
        self.dtype = next(self.thinker.parameters()).dtype
        self.device = next(self.thinker.parameters()).device
        self.stop_ids = torch.tensor(stop_ids, dtype=torch.long, device=self.device)
        self.follow = follow
        self.accept = int(model.config.talker_config.accept_hidden_layer) if follow else 0

    def prompt_length(self, state: TextState) -> int:
        return int(state.data["inputs"]["input_ids"].shape[1])

    def _pick(
        self, states: list[TextState], hidden: torch.Tensor, fed: torch.Tensor
    ) -> TokenOutput:
        """The next token of every row; ``fed`` is the embedding of the token this step fed."""
        logits = self.thinker.lm_head(hidden).float()
        tokens = sample_tokens(
            logits, [s.data["sampling"] for s in states], [s.tokens for s in states]
        )
        stop = torch.isin(tokens, self.stop_ids)
        if not self.follow:
            return TokenOutput(tokens=tokens, stop=stop)
        return TokenOutput(tokens=tokens, stop=stop, follow=fed, follow_lag=1)

    def _positions(self, text: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        """``[4, rows, new]``: the text positions (cache order) then the three RoPE rows."""
        return torch.cat([text[None], rope])

    def prefill(self, states: list[TextState], cache: SlotCache) -> TokenOutput:
        model = self.thinker.model
        inputs = [s.data["inputs"] for s in states]
        ids = torch.cat([i["input_ids"] for i in inputs]).to(self.device)
        media = batch_media(inputs, self.device, self.dtype)
        audio_lengths = None
        if "feature_attention_mask" in media:
            audio_lengths = media["feature_attention_mask"].sum(-1)
        rope, deltas = model.get_rope_index(
            ids,
            media.get("image_grid_thw"),
            media.get("video_grid_thw"),
            torch.ones_like(ids),
            False,
            audio_lengths,
            media.get("video_second_per_grid"),
        )
        for row, state in enumerate(states):
            state.data["rope_delta"] = deltas[row, 0].to(self.device)
        wants_hidden = self.follow and any(s.with_audio for s in states)
        out = model(
            input_ids=ids,
            **media,
            position_ids=self._positions(cache.position_ids(), rope.to(self.device)),
            attention_mask=cache.attention_mask(self.dtype),
            cache=cache,
            use_cache=True,
            # only the two the talker reads (the input embeddings, the accepted layer)
            output_hidden_states=[0, self.accept] if wants_hidden else None,
        )
        if wants_hidden:
            embeds, accepted = out.hidden_states[0], out.hidden_states[self.accept]
            for row, state in enumerate(states):
                if state.with_audio:
                    self._keep_for_talker(state, ids[row], embeds[row], accepted[row])
        fed = self.thinker.get_input_embeddings()(ids[:, -1])  # overwritten by the next step
        return self._pick(states, out.last_hidden_state[:, -1], fed)

    def _keep_for_talker(
        self, state: TextState, ids: torch.Tensor, embeds: torch.Tensor, accepted: torch.Tensor
    ) -> None:
        """What the talker's prompt is built from (``user_positions`` / ``assistant_start``
        were found on the host by the pipeline's ``prepare``)."""
        user = state.data["user_positions"].to(self.device)
        start = int(state.data["assistant_start"])
        state.data["talker_source"] = {
            "user_ids": ids.index_select(0, user),
            "user_embeds": embeds.index_select(0, user),
            "user_hidden": accepted.index_select(0, user),
            "assistant_head": embeds[start : start + 3],
        }

    def decode(self, states: list[TextState], last: TokenOutput, cache: SlotCache) -> TokenOutput:
        embeds = self.thinker.get_input_embeddings()(last.tokens.view(-1, 1))
        text = cache.position_ids()
        rope = (text + torch.stack([s.data["rope_delta"] for s in states])[:, None])[None].expand(
            3, -1, -1
        )
        out = self.thinker.model.language_model(
            inputs_embeds=embeds,
            position_ids=self._positions(text, rope),
            attention_mask=cache.attention_mask(self.dtype),
            cache=cache,
            use_cache=True,
        )
        return self._pick(states, out.last_hidden_state[:, -1], embeds[:, 0])
