"""Whole episodes into a Minari dataset (Farama's offline-RL format), without jax.

Written with minari's own storage (the Arrow backend: one folder per episode under
``<dataset>/data``, ``metadata.json`` beside them) and ``EpisodeBuffer``s, so
``minari.load_dataset`` (with ``MINARI_DATASETS_PATH`` set to the recording folder) and
``minari show`` read it as any other. Each commit stages its episodes in a hidden folder,
fsyncs them, renames each into place under the next free ids, then replaces
``metadata.json`` atomically; minari counts only ``total_episodes`` of them, so an episode
folder renamed just before a kill is invisible and removed when the recording resumes.
Each episode's own ``metadata.json`` also names its ``eps_id``, the worker and weights
versions that sampled it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rolloutfleet.datasets.durable import (
    OutputError,
    describe,
    fsync_dir,
    fsync_tree,
    remove_tree,
    sync_all,
    write_atomic,
)
from rolloutfleet.datasets.stitching import Episode, observations

METADATA = "metadata.json"
STAGED_EPISODES = 1024
"""Episodes staged together."""


def dataset_id_for(job: str) -> str:
    """Minari's id grammar, ``name-v<version>``: ``cartpole-v0``."""
    return f"{job}-v0"


class MinariFiles:
    """The Minari dataset ``<folder>/<dataset_id>`` of a recording."""

    def __init__(self, folder: Path, dataset_id: str, observation_space: Any, action_space: Any, env_spec: Any,
                 description: str) -> None:  # fmt: skip
        self.folder = folder
        self.dataset_id = dataset_id
        self.data = folder / dataset_id / "data"
        self.observation_space = observation_space
        self.action_space = action_space
        self.env_spec = env_spec
        self.description = description

    def _storage(self, path: Path) -> Any:
        from minari.dataset.minari_storage import MinariStorage

        path.parent.mkdir(parents=True, exist_ok=True)
        return MinariStorage.new(path, observation_space=self.observation_space, action_space=self.action_space,
                                 env_spec=self.env_spec, data_format="arrow", jpeg_encoding=False)  # fmt: skip

    def ensure(self) -> None:
        """Create the (empty) dataset if it does not exist: staged, then renamed into place."""
        if (self.data / METADATA).exists():
            return
        import minari

        staging = self.folder / ".staging-dataset"
        remove_tree(staging)
        try:
            self._storage(staging / "data")
            raw = json.loads((staging / "data" / METADATA).read_text())
            raw.update(dataset_id=self.dataset_id, minari_version=minari.__version__, algorithm_name="rolloutfleet",
                       description=self.description, author=["rolloutfleet"])  # fmt: skip
            (staging / "data" / METADATA).write_text(json.dumps(raw))
            fsync_tree(staging)
            os.replace(staging, self.folder / self.dataset_id)
            fsync_dir(self.folder)
        except OSError as exc:
            remove_tree(staging)
            raise OutputError(f"cannot create the Minari dataset in {self.folder}: {describe(exc)}") from None

    def recover(self, episodes: int, steps: int) -> None:
        """Back to the committed ``episodes``: remove later episode folders, fix the totals."""
        remove_tree(self.folder / ".staging")
        for path in self.data.iterdir():
            if path.is_dir() and path.name.isdigit() and int(path.name) >= episodes:
                remove_tree(path)
        self._write_totals(episodes, steps)

    def _write_totals(self, episodes: int, steps: int) -> None:
        raw = json.loads((self.data / METADATA).read_text())
        if (raw.get("total_episodes"), raw.get("total_steps")) == (episodes, steps):
            return
        raw.update(total_episodes=episodes, total_steps=steps)
        data = json.dumps(raw).encode()
        write_atomic(self.data / METADATA, lambda file: _put(file, data))

    def commit(self, episodes: Sequence[Episode], first_id: int, steps: int) -> None:
        """Write ``episodes`` as ids ``first_id`` ...; ``steps``: the dataset's total after them."""
        for start in range(0, len(episodes), STAGED_EPISODES):
            self._stage(episodes[start : start + STAGED_EPISODES], first_id + start)
        if episodes:
            self._write_totals(first_id + len(episodes), steps)

    def _stage(self, episodes: Sequence[Episode], first_id: int) -> None:
        """Some episodes through minari's storage in a hidden folder, then renamed into place.
        Several at a time, to bound the staging folder."""
        staging = self.folder / ".staging"
        remove_tree(staging)
        try:
            storage = self._storage(staging / "data")
            # The staging dataset's size is never read (only its episode folders are kept):
            # spare minari re-measuring the whole folder after every episode it writes.
            storage.get_size = lambda: 0
            storage.update_episodes([_buffer(episode, first_id + k) for k, episode in enumerate(episodes)])
            for k, episode in enumerate(episodes):
                metadata = staging / "data" / str(first_id + k) / METADATA
                metadata.write_text(json.dumps({**json.loads(metadata.read_text()), **_provenance(episode)}))
            sync_all(staging)  # one flush of everything staged (fsync of each file costs more than the write)
            for k in range(len(episodes)):
                os.replace(staging / "data" / str(first_id + k), self.data / str(first_id + k))
            fsync_dir(self.data)
        except OSError as exc:
            raise OutputError(f"cannot write episodes into {self.data}: {describe(exc)}") from None
        finally:
            remove_tree(staging)


def _put(file: Any, data: bytes) -> None:
    file.write(data)


def _buffer(episode: Episode, episode_id: int) -> Any:
    from minari.data_collector.episode_buffer import EpisodeBuffer

    columns = episode.columns
    return EpisodeBuffer(
        id=episode_id,
        observations=observations(episode),
        actions=columns["actions"],
        rewards=columns["rewards"].astype(np.float64).tolist(),
        terminations=columns["terminateds"].tolist(),
        truncations=columns["truncateds"].tolist(),
    )


def _provenance(episode: Episode) -> Mapping[str, Any]:
    columns = episode.columns
    info: dict[str, Any] = {"eps_id": episode.eps_id}
    if "worker_index" in columns:
        info["worker_index"] = int(columns["worker_index"][0])
    if "weights_seq_no" in columns:
        info["weights_seq_no"] = [int(columns["weights_seq_no"].min()), int(columns["weights_seq_no"].max())]
    return info
