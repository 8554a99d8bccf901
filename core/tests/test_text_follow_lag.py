"""ReplyBuffer with a lagging follow (TokenOutput.follow_lag): each entry lands at its own
token's index, ``where`` stays exact at the stop token, and ``max_tokens`` ends one earlier."""

from __future__ import annotations

import torch

from omni_core.chat import ReplyBuffer, TokenOutput


def _out(token: int, stop: bool, value: float, lag: int) -> TokenOutput:
    return TokenOutput(
        tokens=torch.tensor([token]),
        stop=torch.tensor([stop]),
        follow=torch.full((1, 2), value),
        follow_lag=lag,
    )


def test_lagging_entries_land_at_their_own_token() -> None:
    reply = ReplyBuffer(rows=2, max_len=8, device="cpu")
    # step k makes token k and carries the entry of token k-1 (prefill: a throwaway at 0)
    reply.write([1], [0], _out(5, False, -1.0, 1))
    reply.write([1], [1], _out(6, False, 10.0, 1))  # entry of token 0
    reply.write([1], [2], _out(7, False, 11.0, 1))  # entry of token 1
    reply.write([1], [3], _out(8, True, 12.0, 1))  # token 3 stops; entry of token 2
    values, where = reply.read([1, 1, 1, 1, 1], [0, 1, 2, 3, 4])
    assert values[:, 0].tolist() == [10.0, 11.0, 12.0, 0.0, 0.0]
    assert where.tolist() == [0, 0, 0, 1, 2]


def test_max_tokens_ends_one_entry_earlier_with_a_lag() -> None:
    reply = ReplyBuffer(rows=1, max_len=8, device="cpu")
    for index in range(3):
        reply.write([0], [index], _out(5 + index, False, float(index), 1))
    reply.end(0, 3)  # three tokens made, the cap: token 2's entry was never computed
    _, where = reply.read([0, 0, 0], [1, 2, 3])
    assert where.tolist() == [0, 1, 2]


def test_without_lag_nothing_changes() -> None:
    reply = ReplyBuffer(rows=1, max_len=8, device="cpu")
    reply.write([0], [0], _out(5, False, 1.0, 0))
    reply.write([0], [1], _out(6, True, 2.0, 0))
    values, where = reply.read([0, 0], [0, 1])
    assert values[:, 0].tolist() == [1.0, 0.0] and where.tolist() == [0, 1]
    reply.end(0, 2)
    assert reply.stop_at[0].item() == 1
    cat = TokenOutput.cat([_out(1, False, 0.0, 1), _out(2, False, 0.0, 1)])
    assert cat.follow_lag == 1 and cat.rows(0, 1).follow_lag == 1
