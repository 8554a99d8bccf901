"""Conformance checks of the distributed primitives, run inside a worker group.

Used by omni's own tests (gloo, two CPU processes) and meant for platform plugin authors:
the same checks on NCCL/HCCL/RCCL prove a new backend's collectives give exact results::

    python -m omni_core.diffusion.distributed.checks --ulysses-degree 2

Each check compares the parallel result with the single-process computation done on the same
rank, from the same seeded inputs, and reports the largest absolute error.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from omni_core.contract.errors import InvalidRequestError
from omni_core.diffusion.distributed.worker import WorkerContext, WorkerProgram


def _inputs(seed: int, *shape: int, dtype: Any = None) -> Any:
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float32).to(dtype or torch.float32)


class PrimitiveChecks(WorkerProgram):
    """Ulysses attention (self, joint with the text first or last, uneven, masked), shard/gather
    and cfg-parallel checks.

    Needs a layout with ``ulysses_degree >= 2``; cfg checks run on the cfg group, or on the
    whole world when it is a ulysses-only pair.
    """

    def setup(self, ctx: WorkerContext) -> None:
        from omni_core.diffusion.distributed.ulysses import SequenceParallel

        self.ctx = ctx
        self.sp = SequenceParallel(ctx.state.ulysses_group)

    def run(self, payload: Any) -> dict[str, Any]:
        import torch
        import torch.distributed as dist

        seed = int(payload.get("seed", 0)) if isinstance(payload, dict) else 0
        device = self.ctx.device
        results: dict[str, float] = {}
        with torch.no_grad():
            results.update(self._ulysses(seed, device))
            group = self.ctx.state.cfg_group
            if group is None and self.ctx.world_size == 2:
                import torch.distributed as dist

                group = dist.group.WORLD  # a ulysses-only pair doubles as a cfg pair
            if group is not None:
                results.update(self._cfg(seed, device, group))
        # Every rank checked its own part: report the worst over all ranks.
        names = sorted(results)
        errors = torch.tensor([results[n] for n in names], dtype=torch.float64)
        dist.all_reduce(errors, op=dist.ReduceOp.MAX, group=self.ctx.state.control_group)
        return {"errors": dict(zip(names, errors.tolist(), strict=True)), "pid": os.getpid()}

    # -- ulysses --------------------------------------------------------------------------------
    def _ulysses(self, seed: int, device: Any) -> dict[str, float]:
        import torch

        from omni_core.contract.attention import AttentionRouter, dispatch_attention, use_router
        from omni_core.diffusion.distributed.ulysses import SequenceParallel
        from omni_core.runtime.kernels.sdpa import sdpa, sdpa_math

        sp = self.sp
        out: dict[str, float] = {}
        b, h, d = 2, 4, 8
        for length in (16, 13, 3):  # even, uneven, one token on one rank
            q, k, v = (_inputs(seed + i, b, length, h, d).to(device) for i in range(3))
            ref = sdpa(q, k, v)
            got = sp.gather(sp.attention(sdpa)(sp.shard(q), sp.shard(k), sp.shard(v)))
            out[f"self_S{length}"] = (got - ref).abs().max().item()
            # Key-padding mask (the last 3 keys masked for batch element 1) and a per-head mask.
            mask = torch.ones(b, 1, 1, length, dtype=torch.bool, device=device)
            mask[1, ..., -3:] = False
            ref = sdpa(q, k, v, attn_mask=mask, scale=0.3)
            got = sp.gather(
                sp.attention(sdpa_math)(
                    sp.shard(q), sp.shard(k), sp.shard(v), attn_mask=mask, scale=0.3
                )
            )
            out[f"self_masked_S{length}"] = (got - ref).abs().max().item()
            bias = _inputs(seed + 9, b, h, length, length).to(device)
            ref = sdpa(q, k, v, attn_mask=bias)
            got = sp.gather(
                sp.attention(sdpa)(sp.shard(q), sp.shard(k), sp.shard(v), attn_mask=bias)
            )
            out[f"self_head_bias_S{length}"] = (got - ref).abs().max().item()
            out[f"roundtrip_S{length}"] = (sp.gather(sp.shard(q)) - q).abs().max().item()

        # Joint attention: 5 text tokens replicated, 11 image tokens sharded (uneven), text
        # padding masked for batch element 0.
        t, s = 5, 11
        txt = [_inputs(seed + 20 + i, b, t, h, d).to(device) for i in range(3)]
        img = [_inputs(seed + 30 + i, b, s, h, d).to(device) for i in range(3)]
        full = [torch.cat([a, c], dim=1) for a, c in zip(txt, img, strict=True)]
        mask = torch.ones(b, 1, 1, t + s, dtype=torch.bool, device=device)
        mask[0, ..., 3:t] = False
        for name, m in (("joint", None), ("joint_masked", mask)):
            ref = sdpa(*full, attn_mask=m)
            sp.set_length(s)
            local = [torch.cat([a, sp.shard(c)], dim=1) for a, c in zip(txt, img, strict=True)]
            got = sp.attention(sdpa)(*local, attn_mask=m)
            out[f"{name}_text"] = (got[:, :t] - ref[:, :t]).abs().max().item()
            out[f"{name}_image"] = (sp.gather(got[:, t:]) - ref[:, t:]).abs().max().item()
        # Qwen-Image's processor builds the key mask from its local view: [text mask, ones].
        local_mask = torch.cat(
            [mask[..., :t], torch.ones(b, 1, 1, sp.local_len, dtype=torch.bool, device=device)],
            dim=-1,
        )
        ref = sdpa(*full, attn_mask=mask)
        local = [torch.cat([a, sp.shard(c)], dim=1) for a, c in zip(txt, img, strict=True)]
        got = sp.attention(sdpa)(*local, attn_mask=local_mask)
        out["joint_local_mask"] = max(
            (got[:, :t] - ref[:, :t]).abs().max().item(),
            (sp.gather(got[:, t:]) - ref[:, t:]).abs().max().item(),
        )

        # Text after the shard ([image, text]), with the separable square mask a processor
        # builds from its local view's padding vector (fully masked text rows stay masked).
        last = SequenceParallel(self.sp.group, text_last=True)
        last.set_length(s)
        valid = torch.cat([torch.ones(b, s, dtype=torch.bool, device=device), mask[:, 0, 0, :t]], 1)
        square = valid[:, None, None, :] & valid[:, None, :, None]
        ref = sdpa_math(
            *(torch.cat([c, a], dim=1) for a, c in zip(txt, img, strict=True)), attn_mask=square
        )
        mine = slice(last.offset, last.offset + last.local_len)
        local_valid = torch.cat([valid[:, :s][:, mine], valid[:, s:]], dim=1)
        local_square = local_valid[:, None, None, :] & local_valid[:, None, :, None]
        local = [torch.cat([c[:, mine], a], dim=1) for a, c in zip(txt, img, strict=True)]
        got = last.attention(sdpa_math)(*local, attn_mask=local_square)
        out["joint_text_last_masked"] = max(
            (got[:, last.local_len :] - ref[:, s:]).abs().max().item(),
            (last.gather(got[:, : last.local_len]) - ref[:, :s]).abs().max().item(),
        )

        # Through the router: joint goes through Ulysses, cross stays local.
        router = sp.router(
            AttentionRouter(
                functions={"self": sdpa, "cross": sdpa, "joint": sdpa},
                names={"self": "sdpa", "cross": "sdpa", "joint": "sdpa"},
            )
        )
        with use_router(router):
            ref = sdpa(*full)
            local = [torch.cat([a, sp.shard(c)], dim=1) for a, c in zip(txt, img, strict=True)]
            got = dispatch_attention(*local, role="joint")
            out["router_joint"] = max(
                (got[:, :t] - ref[:, :t]).abs().max().item(),
                (sp.gather(got[:, t:]) - ref[:, t:]).abs().max().item(),
            )
            q_img = sp.shard(img[0])
            ref = sdpa(img[0], txt[1], txt[2])
            got = sp.gather(dispatch_attention(q_img, txt[1], txt[2], role="cross"))
            out["router_cross"] = (got - ref).abs().max().item()
        return out

    # -- cfg ------------------------------------------------------------------------------------
    def _cfg(self, seed: int, device: Any, group: Any) -> dict[str, float]:
        import torch

        from omni_core.diffusion.distributed.cfg import cfg_parallel_forward

        torch.manual_seed(seed)
        model = torch.nn.Sequential(
            torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 16)
        ).to(device)
        cond = {"input": _inputs(seed + 40, 1, 7, 16).to(device)}
        uncond = {"input": _inputs(seed + 41, 1, 7, 16).to(device)}
        ref_c, ref_u = model(**cond), model(**uncond)  # single process: one branch at a time
        got_c, got_u = cfg_parallel_forward(model, cond, uncond, group)
        exact = torch.equal(got_c, ref_c) and torch.equal(got_u, ref_u)
        return {
            "cfg_cond": (got_c - ref_c).abs().max().item(),
            "cfg_uncond": (got_u - ref_u).abs().max().item(),
            "cfg_bit_exact_mismatch": 0.0 if exact else 1.0,
        }


class EchoProgram(WorkerProgram):
    """Lock-step echo with a collective; ``"bad"`` fails validation; ``"die"`` kills rank 1.

    For the launcher's own tests: request flow, error transport and dead-worker detection.
    """

    def setup(self, ctx: WorkerContext) -> None:
        self.ctx = ctx

    def validate(self, payload: Any) -> Any:
        if payload == "bad":
            raise InvalidRequestError("payload 'bad' is refused", param="payload")
        return payload

    def run(self, payload: Any) -> Any:
        import torch
        import torch.distributed as dist

        if payload == "die" and self.ctx.rank == self.ctx.world_size - 1:
            os._exit(7)
        if payload == "hang" and self.ctx.rank == self.ctx.world_size - 1:
            time.sleep(3600)
        ranks = torch.tensor([self.ctx.rank + 1], dtype=torch.int64)
        dist.all_reduce(ranks, group=self.ctx.state.control_group)  # proves every rank ran it
        return {"payload": payload, "rank_sum": int(ranks.item()), "pid": os.getpid()}


def main(argv: list[str] | None = None) -> int:
    """Run :class:`PrimitiveChecks` on this machine's platform and print the errors as JSON."""
    from omni_core.contract.config import ParallelConfig
    from omni_core.diffusion.distributed.launcher import ParallelLauncher

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ulysses-degree", type=int, default=2)
    parser.add_argument("--cfg-parallel-size", type=int, default=1)
    parser.add_argument(
        "--device-count",
        type=int,
        default=None,
        help="override the platform's device count (CPU: more ranks than cores)",
    )
    args = parser.parse_args(argv)
    layout = ParallelConfig(
        cfg_parallel_size=args.cfg_parallel_size, ulysses_degree=args.ulysses_degree
    )
    with ParallelLauncher(PrimitiveChecks(), layout, device_count=args.device_count) as launcher:
        result = launcher.run({"seed": 0})
    print(json.dumps(result, indent=2))
    return 0 if max(result["errors"].values()) < 1e-4 else 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
