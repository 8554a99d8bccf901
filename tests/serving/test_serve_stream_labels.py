"""The WebSocket text stream's splitter carries a multi-speaker script's label to each sentence.

A script's line opens with its speaker's label (``SpeechPipeline.script_label``, a regular
expression the model declares); the stream speaks the script a sentence at a time, so a sentence
that continues a line must open with that line's label, or the model speaks it in its default
voice. The label here is a third-party model's own ("<name>:"), not VibeVoice's: the splitter
knows no family. The served check (each sentence equal to ``POST /v1/audio/speech``) is
``plugins/omni-vibevoice/tests/test_omni_vibevoice_served.py``.
"""

from __future__ import annotations

from omni_core.serving.routes.speech.stream import Splitter

#: A made-up family's label: a name in angle brackets and a colon ("<ada>:").
LABEL = r"<\w+>\s*:"


def _run(splitter: Splitter, *pieces: str) -> list[str]:
    out = [s for piece in pieces for s in splitter.feed(piece)]
    return out + splitter.flush()


def test_the_label_in_effect_opens_each_sentence() -> None:
    pieces = ("<ada>: Hello there. How are ", "you?\n<bob>: Fine. Thanks!\nAnd", " you?")
    assert _run(Splitter(label=LABEL), *pieces) == [
        "<ada>: Hello there.",
        "<ada>: How are you?",
        "<bob>: Fine.",
        "<bob>: Thanks!",
        "<bob>: And you?",
    ]
    # without a label (a one-voice model) the sentences are the text's own
    assert _run(Splitter(), *pieces)[1:3] == ["How are you?", "<bob>: Fine."]


def test_a_sentence_of_several_lines_hands_on_its_last_label() -> None:
    splitter = Splitter(label=LABEL)
    assert _run(splitter, "<ADA>: hi\n<bob>: yes. and more.") == [
        "<ADA>: hi\n<bob>: yes.",
        "<bob>: and more.",
    ]


def test_text_before_any_label_is_left_as_it_is() -> None:
    assert _run(Splitter(label=LABEL), "No label. <ada>: Hi. There.") == [
        "No label.",
        "<ada>: Hi.",
        "<ada>: There.",
    ]


def test_clause_and_none_granularities_carry_it_too() -> None:
    comma, stop = "\uff0c", "\u3002"  # the CJK comma and full stop
    assert _run(Splitter("clause", label=LABEL), f"<ada>: ni hao{comma}shi jie{stop}") == [
        f"<ada>: ni hao{comma}",
        f"<ada>: shi jie{stop}",
    ]
    assert _run(Splitter("none", label=LABEL), "<ada>: Hi. ", "There.") == ["<ada>: Hi. There."]


def test_a_long_sentence_keeps_room_for_its_label() -> None:
    from omni_core.serving.routes.speech.stream import MAX_SENTENCE_CHARS

    words = " ".join(["word"] * 2000)  # 9999 characters, no sentence end
    out = _run(Splitter(label=LABEL), f"<ada>: {words}")
    assert len(out) == 3 and all(s.startswith("<ada>: ") for s in out)
    assert max(len(s) for s in out) <= MAX_SENTENCE_CHARS
