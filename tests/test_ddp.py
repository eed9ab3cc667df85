"""Training an imported network with torch.distributed DDP (gloo, 2 processes on the
CPU) through nirbridge.run: both replicas hold the same parameters after every step."""

from __future__ import annotations

import gc
import socket
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

import nirbridge
from tests.conftest import EXAMPLES

BRAILLE = EXAMPLES / "NIR__paper__03_rnn__braille_noDelay_bias_zero.nir"
STEPS = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train(rank: int, world: int, port: int, results: str, backend: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", nirbridge.NirBridgeWarning)
            gm = nirbridge.nir_to_torch(BRAILLE)
        initial = {k: v.detach().clone() for k, v in gm.named_parameters()}
        model = DistributedDataParallel(nirbridge.SequenceModule(gm, backend=backend))
        optimiser = torch.optim.SGD(model.parameters(), lr=0.05)
        data = torch.Generator().manual_seed(100 + rank)  # each replica sees other data
        agreed = []
        for _ in range(STEPS):
            x = (torch.rand(50, 4, 12, generator=data) < 0.3).float()
            target = torch.randint(0, 7, (4,), generator=data)
            out, _ = model(x)
            loss = torch.nn.functional.cross_entropy(out.sum(0), target)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            flat = torch.cat([p.detach().reshape(-1) for p in gm.parameters()])
            gathered = [torch.empty_like(flat) for _ in range(world)]
            dist.all_gather(gathered, flat)
            agreed.append(all(torch.equal(g, gathered[0]) for g in gathered))
        changed = any(not torch.equal(initial[k], p) for k, p in gm.named_parameters())
        torch.save({"agreed": agreed, "changed": changed}, f"{results}/rank{rank}.pt")
        # DDP's reducer holds the process group inside a reference cycle. Left to the
        # collector at interpreter exit, gloo's worker threads are destroyed during
        # finalisation, which aborts the process now and then (SIGABRT, "terminate called
        # without an active exception"). Free it here, and let both ranks finish before
        # either tears down its connections.
        del model, optimiser
        gc.collect()
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("backend", ["auto", "triton"])
def test_ddp_keeps_two_replicas_equal(tmp_path, backend):
    """Also through the Triton back-end's reverse-time kernels (Triton's interpreter
    without a GPU: the replicas inherit TRITON_INTERPRET from conftest)."""
    mp.spawn(_train, args=(2, _free_port(), str(tmp_path), backend), nprocs=2, join=True)
    for rank in range(2):
        result = torch.load(tmp_path / f"rank{rank}.pt")
        assert result["agreed"] == [True] * STEPS
        assert result["changed"], "training did not change the parameters"
