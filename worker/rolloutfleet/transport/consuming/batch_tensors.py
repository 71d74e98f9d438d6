"""A learner's batch as torch tensors: ``BatchConsumer.get(as_torch=True)``. torch is
imported only here, and only when asked for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def as_tensors(
    columns: Mapping[str, np.ndarray], device: str | torch.device | None, pin_memory: bool
) -> dict[str, torch.Tensor]:
    """Column -> tensor (``torch.from_numpy``: no copy), moved to ``device`` (through pinned memory if
    ``pin_memory``); text columns (agent ids) are left out: ``agent_index`` is their number."""
    import torch

    tensors = {}
    for name, array in columns.items():
        if array.dtype.kind == "U":
            continue
        tensor = torch.from_numpy(array)
        if pin_memory:
            tensor = tensor.pin_memory()
        tensors[name] = tensor.to(device, non_blocking=pin_memory) if device is not None else tensor
    return tensors
