"""A batch's columns as torch tensors."""

from __future__ import annotations

import numpy as np
import torch

from rolloutfleet.transport.consuming.batch_tensors import as_tensors


def test_numeric_columns_become_tensors_of_the_same_values_and_text_is_left_out() -> None:
    columns = {
        "obs": np.arange(6, dtype=np.float32).reshape(3, 2),
        "agent_index": np.array([0, 1, 0]),
        "agent_id": np.array(["red", "blue", "red"]),
    }
    tensors = as_tensors(columns, None, pin_memory=False)
    assert sorted(tensors) == ["agent_index", "obs"]
    assert tensors["obs"].dtype == torch.float32 and tensors["obs"].tolist() == columns["obs"].tolist()
    columns["obs"][0, 0] = 42.0  # no copy on the CPU: the tensor is the array's memory
    assert tensors["obs"][0, 0].item() == 42.0


def test_a_device_is_honoured() -> None:
    tensors = as_tensors({"x": np.ones(2)}, "cpu", pin_memory=False)
    assert tensors["x"].device.type == "cpu"
