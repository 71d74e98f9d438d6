"""EnvRunner: step a vector of environments with a torch policy, return SampleBatches.

What RLlib's ``SingleAgentEnvRunner`` does for one process, with a fraction of the
machinery. The hot loop writes into preallocated ``(steps, num_envs)`` column buffers
(one numpy assignment per column per vector step) and does per-env Python work only for
the sub-envs whose episode ended. At the end of a chunk of steps the valid rows are
moved, env-major, into a store; ``sample()`` cuts its batch from that store and keeps
the rest (the start of the next fragment) for the next call.

Autoreset (gymnasium 1.x): with NEXT_STEP envs the step after an episode's end returns
the next episode's first observation and is not a transition, so its row is marked
invalid and never reaches a batch; SAME_STEP envs return the true final observation in
``info["final_obs"]``, which becomes that row's ``new_obs``. Either way no row pairs the
last observation of one episode with the first of the next.

>>> job = RolloutJob.from_dict({"metadata": {"name": "cp"}, "spec": {"env": {"id": "CartPole-v1", "numEnvs": 4}}})
>>> runner = EnvRunner(job)
>>> batch = runner.sample()
>>> len(batch)    # numEnvs x rolloutFragmentLength
800
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from rolloutfleet import batch as sb
from rolloutfleet.batch import SampleBatch
from rolloutfleet.callbacks import Callbacks, load_callbacks, overrides
from rolloutfleet.envs import FAILED, choose_vectorization, derive_seed, episode_id_base, make_vector_env
from rolloutfleet.filters import MeanStdFilter
from rolloutfleet.policy import INIT_SEED_PATH, POLICY_SEED_PATH, Policy
from rolloutfleet.spec import RolloutJob, SpecError

log = logging.getLogger(__name__)

_VALID = "_valid"
_TICK = "_tick"  # global vector-step counter: orders episode ends across sub-envs
_METRICS_WINDOW = 100


class EnvRunner:
    """Samples experience for one worker of a RolloutJob.

    ``worker_index`` (0-based) and ``num_workers`` (default ``spec.replicas``) go into
    every sub-env's :class:`~rolloutfleet.envs.EnvContext` and into the derived seeds.
    """

    def __init__(
        self,
        job: RolloutJob,
        worker_index: int = 0,
        num_workers: int | None = None,
        callbacks: Callbacks | None = None,
    ) -> None:
        spec = job.spec
        if spec.multi_agent is not None:
            raise SpecError(
                "spec.multiAgent: a multi-agent job samples with rolloutfleet.multiagent_sampler.MultiAgentEnvRunner "
                "(rolloutfleet.runners.make_env_runner picks the right runner for a job)"
            )
        self.job = job
        self.worker_index = worker_index
        self.num_workers = spec.replicas if num_workers is None else num_workers
        self.sampling = spec.sampling
        self.num_envs = spec.env.num_envs
        self.vectorization = choose_vectorization(spec.env)
        self.explore = spec.policy.explore
        self._seed = spec.sampling.seed
        self.env = make_vector_env(spec.env, worker_index, self.num_workers)
        self.observation_space = self.env.single_observation_space
        self.action_space = self.env.single_action_space
        mode = self.env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        self._same_step = AutoresetMode(mode) == AutoresetMode.SAME_STEP
        if AutoresetMode(mode) == AutoresetMode.DISABLED:
            raise SpecError("spec.env: vector envs with autoreset disabled are not supported")
        self.policy = Policy(
            spec.policy,
            self.observation_space,
            self.action_space,
            seed=derive_seed(self._seed, worker_index, POLICY_SEED_PATH),
            init_seed=derive_seed(self._seed, INIT_SEED_PATH),
        )
        self.filter = self._build_filter()
        self.callbacks = callbacks or load_callbacks(self.sampling.callbacks)
        self._call_step = overrides(self.callbacks, "on_episode_step")
        self._call_start = overrides(self.callbacks, "on_episode_start")
        self._call_end = overrides(self.callbacks, "on_episode_end")
        self._clip = self._action_clipper()

        n = self.num_envs
        self._columns: dict[str, np.ndarray] = {}
        self._capacity = 0
        self._carry: dict[str, np.ndarray] | None = None  # rows cut off the last batch
        self._filled = 0  # grid rows stepped in the current sample() call
        self._grid_tick = 0
        self._grid_seq_no = 0
        self._obs: np.ndarray | None = None
        self._pending_reset = np.zeros(n, np.bool_)  # NEXT_STEP: this step's row is the reset step
        self._eps_id = np.zeros(n, np.int64)
        self._t = np.zeros(n, np.int64)
        self._ep_return = np.zeros(n, np.float64)
        # eps_ids stay unique across workers and across restarts of the same worker.
        self._eps_base = episode_id_base(worker_index)
        self._eps_counter = 0
        self._tick = 0
        self._env_restarts = 0
        self._episodes_dropped = 0
        self._returns: deque[float] = deque(maxlen=_METRICS_WINDOW)
        self._lengths: deque[int] = deque(maxlen=_METRICS_WINDOW)
        self._period = _Period()
        self._lifetime_steps = 0
        self._lifetime_episodes = 0

    # -- construction helpers ---------------------------------------------------------

    def _build_filter(self) -> MeanStdFilter | None:
        if self.sampling.observation_filter == "none":
            return None
        space = self.observation_space
        if not isinstance(space, spaces.Box):
            raise SpecError(f"spec.sampling.observationFilter: meanStd needs a Box observation space, got {space}")
        return MeanStdFilter(space.shape)

    def _action_clipper(self) -> tuple[np.ndarray, np.ndarray] | None:
        space = self.action_space
        if self.sampling.clip_actions and isinstance(space, spaces.Box):
            return space.low, space.high
        return None

    def _ensure_capacity(self, steps: int) -> None:
        """Grid buffers for ``steps`` rows; growing keeps the rows already stepped."""
        if steps <= self._capacity:
            return
        old, filled = self._columns, self._filled
        steps = max(steps, 2 * self._capacity)
        n = self.num_envs
        obs_space = self.observation_space
        obs_dtype = np.float32 if self.filter is not None else obs_space.dtype
        obs_shape = obs_space.shape or ()
        act_shape = self.action_space.shape or ()
        dist = self.policy.distribution.num_inputs
        specs: dict[str, tuple[tuple[int, ...], Any]] = {
            sb.OBS: (obs_shape, obs_dtype),
            sb.NEW_OBS: (obs_shape, obs_dtype),
            sb.ACTIONS: (act_shape, self.action_space.dtype),
            sb.REWARDS: ((), np.float32),
            sb.TERMINATEDS: ((), np.bool_),
            sb.TRUNCATEDS: ((), np.bool_),
            sb.EPS_ID: ((), np.int64),
            sb.T: ((), np.int64),
            sb.ACTION_LOGP: ((), np.float32),
            sb.ACTION_DIST_INPUTS: ((dist,), np.float32),
            sb.VF_PREDS: ((), np.float32),
            _VALID: ((), np.bool_),
        }
        self._columns = {name: np.empty((steps, n, *shape), dtype) for name, (shape, dtype) in specs.items()}
        for name, column in old.items():
            self._columns[name][:filled] = column[:filled]
        self._capacity = steps

    # -- episodes ---------------------------------------------------------------------

    def _reset_envs(self) -> None:
        restarts = self._env_restarts
        if self.vectorization == "vector":
            seed: Any = derive_seed(self._seed, self.worker_index, restarts)
        else:
            seed = [derive_seed(self._seed, self.worker_index, j, restarts) for j in range(self.num_envs)]
        obs, _ = self.env.reset(seed=seed)
        self._obs = self._filter(obs)
        self._pending_reset[:] = False
        self._start_episodes(np.arange(self.num_envs))

    def _start_episodes(self, envs: np.ndarray) -> None:
        first = self._eps_counter + 1
        self._eps_counter += len(envs)
        self._eps_id[envs] = self._eps_base | np.arange(first, first + len(envs))
        self._t[envs] = 0
        self._ep_return[envs] = 0.0
        if self._call_start:
            for i in envs:
                self.callbacks.on_episode_start(runner=self, env_index=int(i), eps_id=int(self._eps_id[i]))

    def _episodes_ended(self, envs: np.ndarray, terminateds: np.ndarray, truncateds: np.ndarray) -> None:
        """Record the episodes of ``envs`` as ended and start new ones (~3 end per step at 64 envs)."""
        returns, lengths = self._ep_return[envs], self._t[envs]
        self._period.returns.append(returns)
        self._period.lengths.append(lengths)
        if self._call_end:
            for k, i in enumerate(envs):
                self.callbacks.on_episode_end(
                    runner=self,
                    env_index=int(i),
                    eps_id=int(self._eps_id[i]),
                    episode_return=float(returns[k]),
                    episode_length=int(lengths[k]),
                    terminated=bool(terminateds[i]),
                    truncated=bool(truncateds[i]),
                )
        self._start_episodes(envs)

    def _drop_episodes(self, env_indices: np.ndarray, upto: int) -> None:
        """Forget the ongoing episodes of these sub-envs: their rows never reach a batch."""
        cols = self._columns
        for i in env_indices:
            eps = self._eps_id[i]
            cols[_VALID][:upto, i] &= cols[sb.EPS_ID][:upto, i] != eps
            if self._carry is not None:
                keep = self._carry[sb.EPS_ID] != eps
                if not keep.all():
                    self._carry = {k: v[keep] for k, v in self._carry.items()}
            self._episodes_dropped += 1
            self._period.dropped += 1
        self._start_episodes(np.asarray(env_indices))

    def _filter(self, obs: np.ndarray, update: bool = True) -> np.ndarray:
        if self.filter is None:
            return obs
        return self.filter(obs, update=update)

    # -- the hot loop -----------------------------------------------------------------

    def _run_steps(self, start: int, steps: int, explore: bool, random_actions: bool) -> None:
        """Step all sub-envs ``steps`` times, writing grid rows ``start`` onwards.

        This loop is the sampler's hot path (tens of microseconds per vector step at 64
        envs): one numpy assignment per column, per-env Python only where episodes end.
        """
        self._ensure_capacity(start + steps)
        if self._obs is None:
            self._reset_envs()
        cols = self._columns
        c_obs, c_new_obs, c_act = cols[sb.OBS], cols[sb.NEW_OBS], cols[sb.ACTIONS]
        c_rew, c_term, c_trunc = cols[sb.REWARDS], cols[sb.TERMINATEDS], cols[sb.TRUNCATEDS]
        c_eps, c_t, c_logp = cols[sb.EPS_ID], cols[sb.T], cols[sb.ACTION_LOGP]
        c_dist, c_vf, c_valid = cols[sb.ACTION_DIST_INPUTS], cols[sb.VF_PREDS], cols[_VALID]
        clip_rewards = self.sampling.clip_rewards
        same_step = self._same_step
        resilient = self.vectorization == "sync"
        obs_filter, clip, n = self.filter, self._clip, self.num_envs
        act = (lambda _obs: self.policy.random_actions(n)) if random_actions else self.policy.act(explore)
        env_step = self.env.step
        pending, eps_id, t, ep_return = self._pending_reset, self._eps_id, self._t, self._ep_return
        obs = self._obs
        assert obs is not None  # _reset_envs set it
        # Weights change only between sample() calls, so weights_seq_no (like env_id and
        # the tick) is not written per step but filled in when the batch is assembled.
        for s in range(start, start + steps):
            actions, logp, dist_inputs, values = act(obs)
            try:
                next_obs, rewards, terminateds, truncateds, info = env_step(
                    actions if clip is None else np.clip(actions, clip[0], clip[1])
                )
            except Exception as exc:  # noqa: BLE001 - any env error: rebuild (or re-raise, per spec)
                self._restart_vector_env(exc, s)
                env_step, obs = self.env.step, self._obs
                assert obs is not None
                continue
            c_obs[s] = obs
            c_act[s] = actions
            c_logp[s] = logp
            c_dist[s] = dist_inputs
            c_vf[s] = values
            c_eps[s] = eps_id
            c_t[s] = t
            c_term[s] = terminateds
            c_trunc[s] = truncateds
            if clip_rewards is None:
                c_rew[s] = rewards
            else:
                np.clip(rewards, -clip_rewards, clip_rewards, out=c_rew[s])
            if obs_filter is not None:
                next_obs = obs_filter(next_obs)
            c_new_obs[s] = next_obs
            obs = next_obs

            valid = c_valid[s]
            done = terminateds | truncateds
            if pending.any():  # NEXT_STEP: rows of sub-envs that just reset are not transitions
                np.logical_not(pending, out=valid)
                ep_return += np.where(valid, rewards, 0.0)
                t += valid
                done &= valid
                pending[:] = False
            else:
                valid[:] = True
                ep_return += rewards
                t += 1
            failed = info.get(FAILED) if resilient else None
            if failed is not None:
                valid &= ~failed
                done &= ~failed
            if self._call_step:
                self._step_callbacks(s, actions, rewards)
            if done.any():
                ended = done.nonzero()[0]
                if same_step:
                    final = info["final_obs"]
                    for i in ended:
                        c_new_obs[s, i] = self._filter(np.asarray(final[i])[None], update=False)[0]
                else:
                    pending[ended] = True
                self._episodes_ended(ended, terminateds, truncateds)
            if failed is not None:
                self._env_restarts += int(failed.sum())
                self._drop_episodes(failed.nonzero()[0], s)
        self._obs = obs
        transitions = int(c_valid[start : start + steps].sum())
        self._lifetime_steps += transitions
        self._period.steps += transitions

    def _step_callbacks(self, s: int, actions: np.ndarray, rewards: np.ndarray) -> None:
        cols = self._columns
        for i in np.flatnonzero(cols[_VALID][s]):
            self.callbacks.on_episode_step(
                runner=self,
                env_index=int(i),
                eps_id=int(cols[sb.EPS_ID][s, i]),
                action=actions[i],
                reward=float(rewards[i]),
                new_obs=cols[sb.NEW_OBS][s, i],
            )

    def _restart_vector_env(self, exc: Exception, step: int) -> None:
        """The whole vector env raised (vector/async modes): rebuild it, drop ongoing episodes."""
        if not self.job.spec.env.restart_failed_sub_envs:
            raise exc
        log.warning("vector env raised %s: %s; recreating it", type(exc).__name__, exc)
        self._columns[_VALID][step] = False
        try:
            self.env.close()
        except Exception:
            log.debug("closing the failed vector env raised", exc_info=True)
        self._env_restarts += 1
        self.env = make_vector_env(self.job.spec.env, self.worker_index, self.num_workers)
        self._drop_episodes(np.arange(self.num_envs), step)
        obs, _ = self.env.reset(seed=self._reset_seed())
        self._obs = self._filter(obs)
        self._pending_reset[:] = False

    def _reset_seed(self) -> Any:
        if self.vectorization == "vector":
            return derive_seed(self._seed, self.worker_index, self._env_restarts)
        return [derive_seed(self._seed, self.worker_index, j, self._env_restarts) for j in range(self.num_envs)]

    # -- assembling batches: carried rows, then this call's grid rows, env-major ---------

    def _layout(self) -> _Layout:
        """Every available row (carry first, then valid grid rows), ordered by env then time."""
        self._ensure_capacity(1)
        take = self._columns[_VALID][: self._filled].T  # (envs, steps): nonzero is env-major
        grid_env, grid_step = np.nonzero(take)
        carry = self._carry
        carried = 0 if carry is None else len(carry[sb.ENV_ID])
        env = grid_env if carried == 0 else np.concatenate([carry[sb.ENV_ID], grid_env])  # type: ignore[index]
        # Stable: within an env, carried rows (earlier in time) stay ahead of grid rows.
        order = np.argsort(env, kind="stable") if carried else np.arange(len(env))
        env_sorted = env[order]
        counts = np.bincount(env_sorted, minlength=self.num_envs)
        starts = np.r_[0, np.cumsum(counts)[:-1]]
        rank = np.arange(len(env_sorted)) - starts[env_sorted]
        grid_flat = grid_step * self.num_envs + grid_env
        return _Layout(order, env_sorted, rank, counts, carried, grid_flat, grid_step)

    def _sorted_column(self, layout: _Layout, name: str) -> np.ndarray:
        """One column for all rows of the layout, in layout order (used for small columns)."""
        return self._gather(layout, name, layout.order)

    def _gather(self, layout: _Layout, name: str, index: np.ndarray) -> np.ndarray:
        """Rows ``index`` (positions in carry ++ grid) of one column."""
        return self._gather_selected(_Selection.of(layout, index), name)

    def _gather_selected(self, sel: _Selection, name: str) -> np.ndarray:
        n = self.num_envs
        if name == sb.ENV_ID:
            grid_part: np.ndarray = (sel.grid_src % n).astype(np.int32)
        elif name == _TICK:
            grid_part = sel.grid_src // n + self._grid_tick
        elif name == sb.WEIGHTS_SEQ_NO:
            grid_part = np.full(len(sel.grid_src), self._grid_seq_no, np.int64)
        else:
            column = self._columns[name][: self._filled]
            grid_part = column.reshape(-1, *column.shape[2:])[sel.grid_src]
        if sel.carry_src is None:
            return grid_part
        assert self._carry is not None
        out = np.empty((sel.size, *grid_part.shape[1:]), grid_part.dtype)
        out[sel.carry_pos] = self._carry[name][sel.carry_src]
        out[sel.grid_pos] = grid_part
        return out

    def _ended(self, layout: _Layout) -> np.ndarray:
        return self._sorted_column(layout, sb.TERMINATEDS) | self._sorted_column(layout, sb.TRUNCATEDS)

    def _complete_keep(self, layout: _Layout, max_episodes: int | None = None) -> np.ndarray:
        """Layout rows that belong to completed episodes (optionally the first ``max_episodes`` to end)."""
        positions = np.flatnonzero(self._ended(layout))
        if max_episodes is not None and len(positions) > max_episodes:
            ticks = self._sorted_column(layout, _TICK)[positions]
            positions = positions[np.argsort(ticks, kind="stable")[:max_episodes]]
        last_end = np.full(self.num_envs, -1)
        np.maximum.at(last_end, layout.env[positions], layout.rank[positions])
        return layout.rank <= last_end[layout.env]

    def _assemble(self, layout: _Layout, keep: np.ndarray) -> SampleBatch:
        """Cut the batch (``keep``, in layout order) and carry the other rows to the next call."""
        chosen = _Selection.of(layout, layout.order[keep])
        rest = _Selection.of(layout, layout.order[~keep])
        names = [name for name in sb.COLUMNS if name != sb.AGENT_INDEX] + [_TICK]
        carry = {name: self._gather_selected(rest, name) for name in names}
        columns = {name: self._gather_selected(chosen, name) for name in names if name != _TICK}
        self._carry = carry
        self._filled = 0
        columns[sb.AGENT_INDEX] = np.zeros(chosen.size, np.int32)
        return SampleBatch({name: columns[name] for name in sb.COLUMNS})

    def _grid_counts(self) -> np.ndarray:
        counts = np.zeros(self.num_envs, np.int64)
        if self._filled:
            counts += self._columns[_VALID][: self._filled].sum(axis=0)
        if self._carry is not None:
            counts = counts + np.bincount(self._carry[sb.ENV_ID], minlength=self.num_envs)
        return counts

    # -- public API -------------------------------------------------------------------

    def sample(
        self,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool | None = None,
        random_actions: bool = False,
    ) -> SampleBatch:
        """Step the envs and return a batch.

        * default, ``truncate_episodes``: ``numEnvs x rolloutFragmentLength`` rows;
        * default, ``complete_episodes``: whole episodes only, at least that many rows;
        * ``num_timesteps``: at least this many rows (rounded up to a multiple of numEnvs
          in truncate mode; whole episodes in complete mode);
        * ``num_episodes``: exactly this many complete episodes.

        Episodes that are still running continue in the next call, with the same ``eps_id``.
        """
        if num_timesteps is not None and num_episodes is not None:
            raise ValueError("give num_timesteps or num_episodes, not both")
        if (num_timesteps is not None and num_timesteps < 1) or (num_episodes is not None and num_episodes < 1):
            raise ValueError("num_timesteps and num_episodes must be at least 1")
        explore = self.explore if explore is None else explore
        started = time.perf_counter()
        fragment = self.sampling.rollout_fragment_length
        self._filled = 0
        self._grid_tick = self._tick
        self._grid_seq_no = self.policy.weights_seq_no

        def step(steps: int) -> None:
            self._run_steps(self._filled, steps, explore, random_actions)
            self._filled += steps
            self._tick += steps

        if num_episodes is not None or self.sampling.batch_mode == "complete_episodes":
            target = num_timesteps if num_timesteps is not None else fragment * self.num_envs
            while True:
                layout = self._layout()
                if num_episodes is not None:
                    if int(self._ended(layout).sum()) >= num_episodes:
                        keep = self._complete_keep(layout, num_episodes)
                        break
                else:
                    keep = self._complete_keep(layout)
                    if int(keep.sum()) >= target:
                        break
                step(fragment)
        else:
            per_env = fragment if num_timesteps is None else -(-num_timesteps // self.num_envs)
            while (missing := per_env - int(self._grid_counts().min())) > 0:
                step(missing)
            layout = self._layout()
            keep = layout.rank < per_env
        batch = self._assemble(layout, keep)
        self._period.seconds += time.perf_counter() - started
        self.callbacks.on_sample_end(runner=self, batch=batch)
        return batch

    # weights, filters, state ---------------------------------------------------------

    @property
    def weights_seq_no(self) -> int:
        return self.policy.weights_seq_no

    def get_weights(self) -> dict[str, np.ndarray]:
        return self.policy.get_weights()

    def set_weights(self, weights: Mapping[str, Any], seq_no: int | None = None) -> bool:
        """Load weights unless ``seq_no`` is not newer than the loaded one; returns whether loaded."""
        return self.policy.set_weights(weights, seq_no)

    def get_filters(self, flush_after: bool = False) -> dict[str, MeanStdFilter]:
        """Copies of the observation filters, keyed by policy id (``"default"``)."""
        if self.filter is None:
            return {}
        copy = self.filter.copy()
        if flush_after:
            self.filter.flush()
        return {"default": copy}

    def sync_filters(self, filters: Mapping[str, MeanStdFilter]) -> None:
        """Adopt merged filter statistics (keeping what this runner saw since its last flush)."""
        if self.filter is not None and "default" in filters:
            self.filter.sync(filters["default"])

    def get_state(self) -> dict[str, Any]:
        """Weights, their seq no, filter state and lifetime counters: plain dicts and arrays."""
        return {
            "weights": self.get_weights(),
            "weights_seq_no": self.policy.weights_seq_no,
            "filters": {"default": self.filter.get_state()} if self.filter is not None else {},
            "num_env_steps_sampled_lifetime": self._lifetime_steps,
            "num_episodes_lifetime": self._lifetime_episodes + sum(len(r) for r in self._period.returns),
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        if "weights" in state:
            self.policy.set_weights(state["weights"])
            self.policy.weights_seq_no = int(state.get("weights_seq_no", self.policy.weights_seq_no))
        filters = state.get("filters", {})
        if self.filter is not None and "default" in filters:
            self.filter.set_state(filters["default"])
        self._lifetime_steps = int(state.get("num_env_steps_sampled_lifetime", self._lifetime_steps))
        self._lifetime_episodes = int(state.get("num_episodes_lifetime", self._lifetime_episodes))

    def get_metrics(self) -> dict[str, float | int]:
        """Episode statistics over the last 100 episodes, and counters since the previous call."""
        period, self._period = self._period, _Period()
        returns = np.concatenate(period.returns) if period.returns else np.zeros(0)
        lengths = np.concatenate(period.lengths) if period.lengths else np.zeros(0, np.int64)
        self._returns.extend(returns.tolist())
        self._lengths.extend(lengths.tolist())
        self._lifetime_episodes += len(returns)
        window = np.array(self._returns)
        nan = float("nan")
        return {
            "episode_return_mean": float(window.mean()) if len(window) else nan,
            "episode_return_min": float(window.min()) if len(window) else nan,
            "episode_return_max": float(window.max()) if len(window) else nan,
            "episode_len_mean": float(np.mean(self._lengths)) if self._lengths else nan,
            "num_episodes": len(returns),
            "num_env_steps_sampled": period.steps,
            "env_steps_per_s": period.steps / period.seconds if period.seconds > 0 else 0.0,
            "num_episodes_dropped": period.dropped,
            "num_env_steps_sampled_lifetime": self._lifetime_steps,
            "num_episodes_lifetime": self._lifetime_episodes,
            "num_env_restarts": self._env_restarts,
            "weights_seq_no": self.policy.weights_seq_no,
        }

    def close(self) -> None:
        self.env.close()

    def __enter__(self) -> EnvRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Layout(NamedTuple):
    order: np.ndarray  # layout position -> index into carry ++ grid rows
    env: np.ndarray  # env id per layout position
    rank: np.ndarray  # step index within the env's rows per layout position
    counts: np.ndarray  # rows per env
    carried: int  # rows coming from the carry
    grid_flat: np.ndarray  # per valid grid row: step * num_envs + env
    grid_step: np.ndarray


class _Selection(NamedTuple):
    """Where selected rows come from: the carry and/or the grid (flat step * envs + env)."""

    size: int
    grid_pos: np.ndarray
    grid_src: np.ndarray
    carry_pos: np.ndarray | None
    carry_src: np.ndarray | None

    @staticmethod
    def of(layout: _Layout, index: np.ndarray) -> _Selection:
        if layout.carried == 0:
            return _Selection(len(index), np.arange(len(index)), layout.grid_flat[index], None, None)
        from_carry = index < layout.carried
        carry_pos = np.flatnonzero(from_carry)
        grid_pos = np.flatnonzero(~from_carry)
        grid_src = layout.grid_flat[index[grid_pos] - layout.carried]
        return _Selection(len(index), grid_pos, grid_src, carry_pos, index[carry_pos])


class _Period:
    __slots__ = ("dropped", "lengths", "returns", "seconds", "steps")

    def __init__(self) -> None:
        self.returns: list[np.ndarray] = []  # one array per vector step with episode ends
        self.lengths: list[np.ndarray] = []
        self.steps = 0
        self.seconds = 0.0
        self.dropped = 0
