"""One request's prompt for the Qwen2.5-Omni stages: processor, media encoders, mrope positions.

The processor (transformers' ``Qwen2_5OmniProcessor``) makes the token ids and media features;
the thinker's own encoders (``get_audio_features``, ``get_image_features``,
``get_video_features``) and ``get_placeholder_mask`` put the media into the prompt embeddings
(what its forward does before the language model, done here once per request so the runtime's
prefill runs only the language model); ``get_rope_index`` gives the mrope positions and the
delta later positions continue from, for the thinker and (ids + text bos + first token) for the
talker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .messages import ProcessorInputs

#: The official system prompt (the real checkpoints speak only under it).
SYSTEM_PROMPT = (
    "You are Qwen, a virtual human developed by the Qwen Team, Alibaba Group, capable of "
    "perceiving auditory and visual inputs, as well as generating text and speech."
)


def processor_batch(processor: Any, inputs: ProcessorInputs) -> Any:
    """The processor's output for one conversation (``return_tensors="pt"``)."""
    text = processor.apply_chat_template(
        inputs.conversation, add_generation_prompt=True, tokenize=False
    )
    return processor(text=text, **inputs.processor_kwargs(), return_tensors="pt", padding=True)


def _merge_media(thinker: Any, ids: Any, embeds: Any, batch: Any) -> Any:
    model = thinker.model
    if batch.get("input_features") is not None:
        features = model.get_audio_features(
            batch["input_features"].to(embeds.device, embeds.dtype),
            batch["feature_attention_mask"].to(embeds.device),
            return_dict=True,
        ).last_hidden_state
        _, _, mask = model.get_placeholder_mask(ids, inputs_embeds=embeds)
        embeds = embeds.masked_scatter(mask, features.to(embeds.dtype))
    for key, grid, slot in (
        ("pixel_values", "image_grid_thw", 0),
        ("pixel_values_videos", "video_grid_thw", 1),
    ):
        if batch.get(key) is None:
            continue
        import torch

        encode = model.get_image_features if slot == 0 else model.get_video_features
        out = encode(
            batch[key].to(embeds.device, thinker.model.visual.dtype),
            batch[grid].to(embeds.device),
            return_dict=True,
        )
        features = torch.cat(out.pooler_output, dim=0).to(embeds.dtype)
        named = {"image_features": features} if slot == 0 else {"video_features": features}
        mask = model.get_placeholder_mask(ids, inputs_embeds=embeds, **named)[slot]
        embeds = embeds.masked_scatter(mask, features)
    return embeds


def build_prompt(
    model: Any, processor: Any, inputs: ProcessorInputs, speaker: int | None
) -> dict[str, Any]:
    """The per-request data of the stages; ``speaker`` (an index into ``model.speaker_map``)
    None: text only (no talker data)."""
    import torch

    thinker = model.thinker
    embed = thinker.get_input_embeddings()
    device = embed.weight.device
    batch = processor_batch(processor, inputs)
    ids = batch["input_ids"].to(device)
    mask = batch["attention_mask"].to(device)
    grids = {
        "image_grid_thw": batch.get("image_grid_thw"),
        "video_grid_thw": batch.get("video_grid_thw"),
    }
    grids = {k: (v.to(device) if v is not None else None) for k, v in grids.items()}
    audio_lengths = batch.get("feature_attention_mask")
    audio_lengths = audio_lengths.sum(-1).to(device) if audio_lengths is not None else None
    seconds = batch.get("video_second_per_grid")
    seconds = torch.as_tensor(seconds, device=device) if seconds is not None else None
    embeds = _merge_media(thinker, ids, embed(ids), batch)
    positions, delta = thinker.get_rope_index(
        ids, grids["image_grid_thw"], grids["video_grid_thw"], mask, False, audio_lengths, seconds
    )
    data: dict[str, Any] = {
        "input_ids": ids[0],
        "prompt": embeds[0],
        "positions": positions,
        "rope_delta": int(delta.view(-1)[0]),
        "processor_batch": batch,
    }
    if speaker is None:
        return data
    talker = model.talker
    media = torch.isin(
        ids[0],
        torch.tensor(
            [
                thinker.config.audio_token_index,
                thinker.config.image_token_index,
                thinker.config.video_token_index,
            ],
            device=device,
        ),
    )
    bos = int(list(model.speaker_map.values())[speaker]["bos_token"])
    # the talker's positions take the first answer token as text: any text id gives the same
    text_ids = torch.cat([ids, torch.tensor([[bos, bos]], device=device)], dim=1)
    talker_mask = torch.cat([mask, mask.new_ones((1, 2))], dim=1)
    talker_positions, talker_delta = talker.get_rope_index(
        text_ids,
        grids["image_grid_thw"],
        grids["video_grid_thw"],
        talker_mask,
        False,
        audio_lengths,
        seconds,
    )
    data.update(
        {
            "talker_embeds": embeds[0] * (~media).unsqueeze(-1).to(embeds.dtype),
            "speaker_bos": embed(torch.tensor([bos], device=device))[0],
            "talker_positions": talker_positions,
            "talker_rope_delta": int(talker_delta.view(-1)[0]),
        }
    )
    return data
