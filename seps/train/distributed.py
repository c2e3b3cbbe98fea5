"""Data-parallel training under ``torchrun``.

:func:`init_distributed` joins the process group that ``torchrun`` describes (a plain
single process without one) and returns this process's :class:`Dist`; :class:`TrainStep`
is the module DDP wraps (:func:`data_parallel`): each rank encodes its slice of the batch
and the embeddings are all-gathered, so every rank scores the whole batch exactly as a
single process would.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from ..model.seps_model import SEPSModel
from ..runtime.devices import resolve_device


@dataclass(frozen=True)
class Dist:
    """This process's place in a ``torchrun`` job (world 1 without one)."""

    world: int = 1
    rank: int = 0
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


# The ``torch.distributed`` imports below sit inside the functions on purpose: they are
# only needed under ``torchrun`` (world > 1), and ``torch.distributed`` is not built
# into every PyTorch (``torch.distributed.is_available()`` can be False).


def init_distributed(device_name: str) -> tuple[Dist, torch.device]:
    """Join the process group that ``torchrun`` describes in the environment (NCCL on
    CUDA, gloo on the CPU); without ``WORLD_SIZE > 1`` this is a plain single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist(), resolve_device(device_name)
    import torch.distributed as dist

    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = device_name != "cpu" and torch.cuda.is_available()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo")
    device = torch.device(f"cuda:{local}") if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    return Dist(world, rank, local), device


def barrier(d: Dist) -> None:
    """Wait for every rank (nothing to wait for in a single process)."""
    if d.world > 1:
        import torch.distributed as dist

        dist.barrier()


class TrainStep(torch.nn.Module):
    """Encoders and head for one training batch (the module DDP wraps).

    Under ``torchrun`` each rank encodes its contiguous slice of the batch; the embeddings
    are all-gathered with their gradient, in rank order, so every rank scores the whole
    ``(B, B)`` batch exactly as a single process would. The all-gather's backward sums
    the ranks' (identical) loss gradients and DDP then averages the parameter gradients,
    which gives the single-process gradient.
    """

    def __init__(
        self, model: SEPSModel, world: int, frozen: bool, per_image_dense: bool = False
    ) -> None:
        super().__init__()
        self.model = model
        self.world = world
        self.frozen = frozen
        # ``candidate`` protocol: row ``j`` of the dense batch is image ``j``'s caption and
        # pair (image j, text i) must use it: the head's dense_per_image.
        self.per_image_dense = per_image_dense

    def _gather(self, x: Tensor) -> Tensor:
        if self.world == 1:
            return x
        from torch.distributed.nn.functional import all_gather

        return torch.cat(all_gather(x.contiguous()), dim=0)

    def _text(self, x: Tensor, lens: Tensor) -> Tensor:
        m = self.model
        return m.project_texts(x) if self.frozen else m.encode_texts(x, lens)

    def forward(
        self,
        img_in: Tensor,
        cap_in: Tensor,
        cap_lens_local: Tensor,
        cap_lens: Tensor,
        dense_in: Tensor | None,
        dense_lens_local: Tensor | None,
        dense_lens: Tensor | None,
        selection_prior: Tensor | None = None,
    ) -> Any:
        m = self.model
        img = m.project_images(img_in) if self.frozen else m.encode_images(img_in)
        img = self._gather(img.float())
        cap = self._gather(self._text(cap_in, cap_lens_local).float())
        dense = None
        if dense_in is not None and dense_lens_local is not None:
            dense = self._gather(self._text(dense_in, dense_lens_local).float())
        kw = {} if selection_prior is None else {"selection_prior": selection_prior}
        return m(img, cap, cap_lens, dense, dense_lens, dense_per_image=self.per_image_dense, **kw)


def data_parallel(step: TrainStep, d: Dist, device: torch.device) -> torch.nn.Module:
    """``step`` wrapped in ``DistributedDataParallel`` under ``torchrun``, else itself."""
    if d.world <= 1:
        return step
    return DistributedDataParallel(
        step,
        device_ids=[device.index] if device.type == "cuda" else None,
        # BERT's pooler and frozen parts never receive a gradient.
        find_unused_parameters=True,
    )
