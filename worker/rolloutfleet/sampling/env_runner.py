"""EnvRunner: step a vector of environments with a policy, return SampleBatches.

What RLlib's ``SingleAgentEnvRunner`` does for one process, with a fraction of the
machinery. The hot loop only acts, steps and writes what the env returned into preallocated
``(steps, num_envs)`` column buffers (:mod:`rolloutfleet.sampling.grid`; one numpy assignment per
column per vector step; observations once, since a row's ``new_obs`` is the next row's
``obs``). Everything
derived from those columns — which rows are transitions, episode ids, ``t``, episode
returns and lengths — is computed for a whole chunk of steps at once by
:class:`~rolloutfleet.sampling.episode_clock.EpisodeClock`. ``sample()`` cuts its batch, env-major, from the valid rows
and carries the rest (the start of the next fragment) to the next call.

Autoreset (gymnasium 1.x): with NEXT_STEP envs the step after an episode's end returns
the next episode's first observation and is not a transition, so its row is marked
invalid and never reaches a batch; SAME_STEP envs return the true final observation in
``info["final_obs"]``, which becomes that row's ``new_obs`` (kept aside and patched in
when the batch is cut). Either way no row pairs the last observation of one episode with
the first of the next.

Dict and Tuple observations (:mod:`rolloutfleet.inference.obs_spaces`) keep one grid buffer
per leaf and reach the batch as ``obs/<path>`` and ``new_obs/<path>`` columns; the model
reads them as the policy's :class:`~rolloutfleet.inference.obs_spaces.ObsParts` says, and a
top-level ``action_mask`` leaf masks the actions (and is the batch's ``action_mask`` column).

>>> job = RolloutJob.from_dict({"metadata": {"name": "cp"}, "spec": {"env": {"id": "CartPole-v1", "numEnvs": 4}}})
>>> runner = EnvRunner(job)
>>> batch = runner.sample()
>>> len(batch)    # numEnvs x rolloutFragmentLength
800
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from rolloutfleet.data import batch as sb
from rolloutfleet.data.batch import DEFAULT_POLICY, SampleBatch
from rolloutfleet.inference.obs_spaces import MASK_KEY, ObsParts, check_masks, leaf_values
from rolloutfleet.inference.policy import ActFn
from rolloutfleet.sampling.callbacks import Callbacks
from rolloutfleet.sampling.envs import (
    FAILED,
    VectorChoice,
    derive_seed,
    episode_id_base,
    make_vector_env,
    plan_vectorization,
)
from rolloutfleet.sampling.episode_clock import Ended, EpisodeClock
from rolloutfleet.sampling.grid import (
    OBS_BUF,
    RAW_REWARDS,
    SEQ_NO,
    TICK,
    VALID,
    ColumnSpecs,
    Grid,
    Layout,
    obs_buffer,
)
from rolloutfleet.sampling.runner import Runner
from rolloutfleet.spec.job import RolloutJob, SpecError

log = logging.getLogger(__name__)


class EnvRunner(Runner[SampleBatch]):
    """Samples experience for one worker of a RolloutJob.

    ``worker_index`` (0-based) and ``num_workers`` (default ``spec.replicas``) go into
    every sub-env's :class:`~rolloutfleet.sampling.envs.EnvContext` and into the derived seeds.
    """

    vector_choice: VectorChoice

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
                "spec.multiAgent: a multi-agent job samples with rolloutfleet.sampling.multiagent_env_runner.MultiAgentEnvRunner "
                "(rolloutfleet.sampling.runners.make_env_runner picks the right runner for a job)"
            )
        super().__init__(job, worker_index, num_workers, callbacks)
        # auto times a throwaway sub-env here; a rebuilt vector env keeps the choice
        self.vector_choice = plan_vectorization(spec.env, worker_index, self.num_workers, spec.resources.cpu)
        self.vectorization = self.vector_choice.mode
        self.explore = spec.policy.explore
        self.env = make_vector_env(spec.env, worker_index, self.num_workers, self.vector_choice)
        self.observation_space = self.env.single_observation_space
        self.action_space = self.env.single_action_space
        mode = self.env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        self._same_step = AutoresetMode(mode) == AutoresetMode.SAME_STEP
        if AutoresetMode(mode) == AutoresetMode.DISABLED:
            raise SpecError("spec.env: vector envs with autoreset disabled are not supported")
        self.policy = self._add_policy(DEFAULT_POLICY, spec.policy, self.observation_space, self.action_space)
        self.parts: ObsParts = self.policy.obs_parts
        self.filter = self.filters.get(DEFAULT_POLICY)
        # Episode callbacks run right after the step they belong to: bookkeeping per step.
        self._per_step = self._call_step or self._call_start or self._call_end
        self._clip = self._action_clipper()
        # Stateful models: one state per sub-env, restarted with each episode (as the OU noise is).
        self._state_init = self.policy.initial_state(self.num_envs) if self.policy.recurrent else []
        self._state = [part.copy() for part in self._state_init]
        self._state_names = sb.state_column_names(len(self._state), spec.policy.state_out) if self._state else ()

        n = self.num_envs
        obs_dtype = np.float32 if self.filter is not None else self.observation_space.dtype
        leaves = {path: (leaf.shape or (), leaf.dtype) for path, leaf in self.parts.leaves} or None
        self._grid = Grid(n, self._grid_columns(), self.observation_space.shape or (), obs_dtype, leaves)
        self._obs: np.ndarray | None = None
        # NEXT_STEP with action masks: a reset step acts on its episode's final observation, whose
        # mask may allow nothing (a finished game); its action is ignored and its row dropped.
        self._mask_exempt = np.zeros(n, np.bool_) if self.parts.masked and not self._same_step else None
        # eps_ids stay unique across workers and across restarts of the same worker.
        self._clock = EpisodeClock(n, self._same_step, episode_id_base(worker_index))
        # complete_episodes looks for ended episodes once per fragment (a layout is a pass over the grid)
        self._episode_chunk = self.sampling.rollout_fragment_length
        self._acting = (self.explore, False)  # this sample() call's (explore, random_actions)
        self._scale: float | None = None  # and its ε or σ (None: stochastic exploration)

    # -- construction helpers ---------------------------------------------------------

    def _action_clipper(self) -> tuple[np.ndarray, np.ndarray] | None:
        space = self.action_space
        if self.sampling.clip_actions and isinstance(space, spaces.Box):
            return space.low, space.high
        return None

    def _grid_columns(self) -> ColumnSpecs:
        """The grid's per-step columns (observations and weights versions are the grid's own)."""
        act_shape = self.action_space.shape or ()
        dist = self.policy.distribution.num_inputs
        specs: dict[str, tuple[tuple[int, ...], Any]] = {
            sb.ACTIONS: (act_shape, self.action_space.dtype),
            sb.REWARDS: ((), np.float32),
            sb.TERMINATEDS: ((), np.bool_),
            sb.TRUNCATEDS: ((), np.bool_),
            sb.EPS_ID: ((), np.int64),
            sb.T: ((), np.int64),
            sb.ACTION_LOGP: ((), np.float32),
            sb.ACTION_DIST_INPUTS: ((dist,), np.float32),
            sb.VF_PREDS: ((), np.float32),
            VALID: ((), np.bool_),
        }
        if self.sampling.clip_rewards is not None:
            specs[RAW_REWARDS] = ((), np.float64)
        if self.policy.exploration is not None:
            specs[sb.EXPLORATION_SCALE] = ((), np.float32)
        for name in self._state_names:
            part = self._state_init[int(name.rsplit("_", 1)[1])]
            specs[name] = (part.shape[1:], np.float32)
        return specs

    # -- episodes ---------------------------------------------------------------------

    def _reset_envs(self) -> None:
        obs, _ = self.env.reset(seed=self._reset_seed())
        self._obs = self._filter(obs)
        self._clock.pending[:] = False
        self._start_episodes(np.arange(self.num_envs))

    def _start_episodes(self, envs: np.ndarray) -> None:
        ids = self._clock.start(envs)
        if self._call_start:
            for i, eps_id in zip(envs, ids, strict=True):
                self.callbacks.on_episode_start(runner=self, env_index=int(i), eps_id=int(eps_id))

    def _drop_episodes(self, env_indices: np.ndarray, upto: int) -> None:
        """Forget the ongoing episodes of these sub-envs: their rows never reach a batch."""
        cols = self._grid.columns
        for i in env_indices:
            eps = self._clock.eps_id[i]
            cols[VALID][:upto, i] &= cols[sb.EPS_ID][:upto, i] != eps
            if self._clock.t[i] > 0:  # an episode that had no transition yet loses nothing
                self.stats.period.dropped += 1
        self._start_episodes(np.asarray(env_indices))

    def _filter(self, obs: np.ndarray, update: bool = True) -> np.ndarray:
        if self.filter is None:
            return obs
        return self.filter(obs, update=update)

    # -- the hot loop -----------------------------------------------------------------

    def _run_steps(self, start: int, steps: int, explore: bool, random_actions: bool) -> None:
        """Step all sub-envs ``steps`` times, writing grid rows ``start`` onwards.

        This loop is the sampler's hot path (tens of microseconds per vector step at 64
        envs): act, step, one numpy assignment per column. Episode bookkeeping runs over
        the whole chunk afterwards (:meth:`_account`); only an env failure, or episode
        callbacks, make it run earlier.
        """
        self._grid.ensure_capacity(start + steps)
        if self._obs is None:
            self._reset_envs()
        cols = self._grid.columns
        c_act, c_rew = cols[sb.ACTIONS], cols[sb.REWARDS]
        c_term, c_trunc, c_logp = cols[sb.TERMINATEDS], cols[sb.TRUNCATEDS], cols[sb.ACTION_LOGP]
        c_dist, c_vf, c_raw = cols[sb.ACTION_DIST_INPUTS], cols[sb.VF_PREDS], cols.get(RAW_REWARDS)
        clip_rewards = self.sampling.clip_rewards
        same_step, per_step = self._same_step, self._per_step
        resilient = self.vectorization == "sync"
        obs_filter, clip, n = self.filter, self._clip, self.num_envs
        act = self._act(explore, random_actions)
        put = self._obs_writer()
        recurrent = bool(self._state)
        act_stateful = self._stateful_act(explore, random_actions) if recurrent else None
        env_step = self.env.step
        # Ornstein-Uhlenbeck noise and a model's state restart with each episode: after the
        # step that ended it (SAME_STEP), or after the reset step that follows (NEXT_STEP).
        noise = None if random_actions else self.policy.noise_state(explore)
        ended = self._clock.pending.copy() if noise is not None or recurrent else None
        obs = self._obs
        assert obs is not None  # _reset_envs set it
        exempt = self._mask_exempt
        if exempt is not None:
            exempt[:] = self._clock.pending
        put(start, obs)
        accounted = start  # rows before this one have their episode bookkeeping done
        # Weights change only between sample() calls, so weights_seq_no (like env_id and
        # the tick) is not written per step but filled in when the batch is assembled.
        for s in range(start, start + steps):
            actions, logp, dist_inputs, values = act(obs) if act_stateful is None else act_stateful(obs, s)
            try:
                next_obs, rewards, terminateds, truncateds, info = env_step(
                    actions if clip is None else np.clip(actions, clip[0], clip[1])
                )
            except Exception as exc:  # noqa: BLE001 - any env error: rebuild (or re-raise, per spec)
                self._account(accounted, s)
                self._restart_vector_env(exc, s)
                if noise is not None:
                    noise.reset(np.ones(n, np.bool_))
                self._restart_state(np.ones(n, np.bool_))
                if ended is not None:  # the rebuilt env's next step is its episodes' first, not a reset step
                    ended[:] = False
                if exempt is not None:
                    exempt[:] = False
                env_step, obs, accounted = self.env.step, self._obs, s + 1
                assert obs is not None
                continue
            c_act[s] = actions
            c_logp[s] = logp
            c_dist[s] = dist_inputs
            c_vf[s] = values
            c_term[s] = terminateds
            c_trunc[s] = truncateds
            if exempt is not None:
                np.logical_or(terminateds, truncateds, out=exempt)
            if ended is not None:
                done = terminateds | truncateds
                starts = done if same_step else ended
                if noise is not None:
                    noise.reset(starts)
                if recurrent:
                    self._restart_state(starts)
                ended = done
            if c_raw is None:
                c_rew[s] = rewards
            else:
                c_raw[s] = rewards
                np.clip(rewards, -clip_rewards, clip_rewards, out=c_rew[s])  # type: ignore[operator]
            if obs_filter is not None:
                next_obs = obs_filter(next_obs)
            put(s + 1, next_obs)
            obs = next_obs
            if info:
                if same_step and "_final_obs" in info:
                    self._keep_final_obs(s, info)
                failed = info.get(FAILED) if resilient else None
                if failed is not None:
                    self._account(accounted, s + 1, failed)
                    accounted = s + 1
                    self.stats.env_restarts += int(failed.sum())
                    self._drop_episodes(failed.nonzero()[0], s)
                    if noise is not None:
                        noise.reset(failed)
                    self._restart_state(failed)
            if per_step:
                self._account(accounted, s + 1)
                accounted = s + 1
        self._account(accounted, start + steps)
        self._obs = obs

    def _act(self, explore: bool, random_actions: bool) -> Any:
        """``obs -> (actions, logp, dist_inputs, values)`` for the loop; Dict/Tuple observations
        are read as the policy's parts say (model input, action mask)."""
        policy, n = self.policy, self.num_envs
        if not self.parts.leaves:
            return (lambda _obs: policy.random_actions(n)) if random_actions else policy.act(explore)
        base: ActFn = (
            (lambda _obs, mask=None: policy.random_actions(n, mask)) if random_actions else policy.act(explore)
        )
        read = self._read_parts()

        def act(obs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
            model_obs, mask = read(obs)
            return base(model_obs) if mask is None else base(model_obs, mask)

        return act

    def _read_parts(self) -> Callable[[Any], tuple[Any, np.ndarray | None]]:
        """Dict/Tuple observations of every sub-env -> (the model's input, the action mask or None)."""
        parts = self.parts
        paths, masked = parts.paths, parts.masked
        names = [f"sub-env {i}" for i in range(self.num_envs)]
        exempt = self._mask_exempt

        def read(obs: Any) -> tuple[Any, np.ndarray | None]:
            leaves = leaf_values(obs, paths)
            if not masked:
                return parts.model_input(leaves), None
            mask = np.asarray(leaves[MASK_KEY]) != 0
            if exempt is not None and exempt.any():
                mask[exempt] = True  # reset steps: any action (ignored by the env)
            try:
                check_masks(mask, names, "")
            except ValueError as exc:
                raise SpecError(f"spec.env: {exc}") from None
            return parts.model_input(leaves), mask

        return read

    def _obs_writer(self) -> Any:
        """``(grid row, observations of every sub-env) -> None``: one buffer, or one per leaf."""
        cols = self._grid.columns
        if not self.parts.leaves:
            c_obs = cols[OBS_BUF]

            def put(row: int, obs: Any) -> None:
                c_obs[row] = obs

            return put
        buffers = [(path, cols[obs_buffer(path)]) for path in self.parts.paths]

        def put_leaves(row: int, obs: Any) -> None:
            values = leaf_values(obs, self.parts.paths)
            for path, buffer in buffers:
                buffer[row] = values[path]

        return put_leaves

    def _stateful_act(
        self, explore: bool, random_actions: bool
    ) -> Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """The step's act for a stateful model, ``(obs, s) -> (actions, logp, dist_inputs,
        values)``: records the state it acts with as grid row ``s``'s ``state_in`` (and the
        state after as ``state_out``), and keeps the new state."""
        act = self.policy.act_recurrent(explore, random_actions)
        cols = self._grid.columns
        parts = len(self._state)
        c_in = [cols[name] for name in self._state_names[:parts]]
        c_out = [cols[name] for name in self._state_names[parts:]]
        read = self._read_parts() if self.parts.leaves else None

        def step(obs: Any, s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
            state = self._state
            for column, part in zip(c_in, state, strict=True):
                column[s] = part
            if read is None:
                actions, logp, dist_inputs, values, new_state = act(obs, state)
            else:
                model_obs, mask = read(obs)
                actions, logp, dist_inputs, values, new_state = act(model_obs, state, mask)
            for column, part in zip(c_out, new_state, strict=False):
                column[s] = part
            self._state = new_state
            return actions, logp, dist_inputs, values

        return step

    def _restart_state(self, starts: np.ndarray) -> None:
        """Sub-envs (a boolean mask) whose next row starts an episode: back to the initial state."""
        if self._state and starts.any():
            for part, initial in zip(self._state, self._state_init, strict=True):
                part[starts] = initial[starts]

    def _keep_final_obs(self, s: int, info: Mapping[str, Any]) -> None:
        """SAME_STEP: the true final observations of the episodes that ended at row ``s``."""
        ended = np.flatnonzero(info["_final_obs"])
        if len(ended) == 0:
            return
        final = info["final_obs"]
        if self.parts.leaves:  # Dict/Tuple observations are not filtered
            base, paths = s * self.num_envs, self.parts.paths
            for i in ended:
                values = leaf_values(final[i], paths)
                self._grid.final_obs[base + int(i)] = {path: np.asarray(values[path]) for path in paths}
            return
        stacked = np.stack([np.asarray(final[i]) for i in ended])
        filtered = self._filter(stacked)  # an observation like any other (NEXT_STEP envs return it as next_obs)
        base = s * self.num_envs
        for k, i in enumerate(ended):
            self._grid.final_obs[base + int(i)] = filtered[k]

    def _account(self, a: int, b: int, failed: np.ndarray | None = None) -> None:
        """Episode bookkeeping for grid rows ``[a, b)`` (:meth:`EpisodeClock.advance`): their
        ``_valid``, ``eps_id`` and ``t`` columns, and the episodes that ended (returns, lengths,
        callbacks), in the order they ended. ``failed`` marks sub-envs whose last row is not a
        transition (their episodes are dropped by the caller)."""
        if b <= a:
            return
        cols = self._grid.columns
        rewards = cols[sb.REWARDS if RAW_REWARDS not in cols else RAW_REWARDS][a:b]
        ended = self._clock.advance(
            cols[sb.TERMINATEDS][a:b], cols[sb.TRUNCATEDS][a:b], rewards,
            cols[VALID][a:b], cols[sb.EPS_ID][a:b], cols[sb.T][a:b], failed,
        )  # fmt: skip
        self.stats.lifetime_env_steps += ended.transitions
        self.stats.period.env_steps += ended.transitions
        self.stats.episodes(ended.returns, ended.lengths)
        if self._per_step:
            self._episode_callbacks(a, cols[VALID][a:b], ended)

    def _episode_callbacks(self, a: int, valid: np.ndarray, ended: Ended) -> None:
        """Steps, then episode ends and the episodes that follow them, row by row."""
        cols, callbacks = self._grid.columns, self.callbacks
        rows, envs, new_ids, returns, lengths = ended.rows, ended.envs, ended.new_ids, ended.returns, ended.lengths
        e = 0
        for r in range(len(valid)):
            s = a + r
            if self._call_step:
                for i in np.flatnonzero(valid[r]):
                    callbacks.on_episode_step(
                        runner=self,
                        env_index=int(i),
                        eps_id=int(cols[sb.EPS_ID][s, i]),
                        action=cols[sb.ACTIONS][s, i],
                        reward=float(cols[sb.REWARDS][s, i]),
                        new_obs=self._grid.new_obs(s, int(i)),
                    )
            while e < len(rows) and rows[e] == r:
                i = int(envs[e])
                if self._call_end:
                    callbacks.on_episode_end(
                        runner=self,
                        env_index=i,
                        eps_id=int(cols[sb.EPS_ID][s, i]),
                        episode_return=float(returns[e]),
                        episode_length=int(lengths[e]),
                        terminated=bool(cols[sb.TERMINATEDS][s, i]),
                        truncated=bool(cols[sb.TRUNCATEDS][s, i]),
                    )
                if self._call_start:
                    callbacks.on_episode_start(runner=self, env_index=i, eps_id=int(new_ids[e]))
                e += 1

    def _restart_vector_env(self, exc: Exception, step: int) -> None:
        """The whole vector env raised (vector/async modes): rebuild it, drop ongoing episodes."""
        self._env_failures.failed(None, exc, progress=self.stats.lifetime_env_steps)  # raises at the limit
        log.warning("vector env raised %s: %s; recreating it", type(exc).__name__, exc)
        self._grid.columns[VALID][step] = False
        try:
            self.env.close()
        except Exception:
            log.debug("closing the failed vector env raised", exc_info=True)
        self.stats.env_restarts += 1
        self.env = make_vector_env(self.job.spec.env, self.worker_index, self.num_workers, self.vector_choice)
        self._drop_episodes(np.arange(self.num_envs), step)
        obs, _ = self.env.reset(seed=self._reset_seed())
        self._obs = self._filter(obs)
        self._obs_writer()(step + 1, self._obs)
        self._clock.pending[:] = False

    def _reset_seed(self) -> Any:
        if self.vectorization == "vector":
            return derive_seed(self._seed, self.worker_index, self.stats.env_restarts)
        return [derive_seed(self._seed, self.worker_index, j, self.stats.env_restarts) for j in range(self.num_envs)]

    # -- assembling batches: the grid's valid rows, env-major (rolloutfleet.sampling.grid) ---------

    def _ended(self, layout: Layout) -> np.ndarray:
        return self._grid.gather(sb.TERMINATEDS, layout.flat) | self._grid.gather(sb.TRUNCATEDS, layout.flat)

    def _complete_keep(self, layout: Layout, max_episodes: int | None = None) -> np.ndarray:
        """Layout rows that belong to completed episodes (optionally the first ``max_episodes`` to end)."""
        positions = np.flatnonzero(self._ended(layout))
        if max_episodes is not None and len(positions) > max_episodes:
            ticks = self._grid.gather(TICK, layout.flat[positions])
            positions = positions[np.argsort(ticks, kind="stable")[:max_episodes]]
        last_end = np.full(self.num_envs, -1)
        np.maximum.at(last_end, layout.env[positions], layout.rank[positions])
        return layout.rank <= last_end[layout.env]

    def _assemble(self, layout: Layout, keep: np.ndarray) -> SampleBatch:
        """Cut the batch (``keep``, in layout order); the other rows stay for the next call."""
        flat, env, step = layout.flat[keep], layout.env[keep], layout.step[keep]
        names = self._batch_columns()
        columns = {
            name: self._grid.gather(name, flat, env, step)
            for name in names
            if name not in (sb.AGENT_INDEX, sb.ACTION_MASK)
        }
        columns[sb.AGENT_INDEX] = np.zeros(len(flat), np.int32)
        if self.parts.masked:
            columns[sb.ACTION_MASK] = columns[f"{sb.OBS}/{MASK_KEY}"] != 0
        self._grid.keep_rest(layout, ~keep)
        return SampleBatch({name: columns[name] for name in names})

    def _batch_columns(self) -> list[str]:
        """The batch's columns in order: a Dict/Tuple observation's leaves in place of obs and new_obs."""
        names: list[str] = []
        for name in sb.COLUMNS:
            if name in (sb.OBS, sb.NEW_OBS) and self.parts.leaves:
                names.extend(f"{name}/{path}" for path in self.parts.paths)
            else:
                names.append(name)
        names.extend(self._state_names)
        if self.policy.exploration is not None:
            names.append(sb.EXPLORATION_SCALE)
        if self.parts.masked:
            names.append(sb.ACTION_MASK)
        return names

    # -- the hooks of Runner.sample() ---------------------------------------------------

    def _begin_sample(self, explore: bool | None, random_actions: bool) -> None:
        explore = self.explore if explore is None else explore
        self._acting = (explore, random_actions)
        scale = self.policy.exploration_scale(explore)
        self._scale = np.nan if scale is not None and random_actions else scale

    def _step(self, steps: int) -> None:
        grid = self._grid
        start = grid.filled
        self._run_steps(start, steps, *self._acting)
        # Weights change only between sample() calls: one seq no per grid row.
        grid.columns[SEQ_NO][start : start + steps] = self.policy.weights_seq_no
        if self._scale is not None:  # so do ε and σ (the learner's global step is applied between calls)
            grid.columns[sb.EXPLORATION_SCALE][start : start + steps] = self._scale
        grid.filled += steps

    def _target_rows(self, target: int) -> int:
        """Truncate mode cuts whole vector steps: ``target`` rounded up to a multiple of numEnvs."""
        return self.num_envs * -(-target // self.num_envs)

    def _steps_missing(self, target: int) -> int:
        missing = self._target_rows(target) - len(self._grid.valid_rows())
        return -(-missing // self.num_envs) if missing > 0 else 0

    def _cut_truncated(self, target: int) -> SampleBatch:
        # The earliest rows, in time order, so no row waits more than a step for a batch
        # (a per-env quota would let envs that reset less often fall further behind).
        last = self._grid.valid_rows()[self._target_rows(target) - 1]
        layout = self._grid.layout()
        return self._assemble(layout, layout.flat <= last)

    def _cut_episodes(self, num_episodes: int | None, target: int) -> SampleBatch | None:
        layout = self._grid.layout()
        if num_episodes is not None:
            if int(self._ended(layout).sum()) < num_episodes:
                return None
            keep = self._complete_keep(layout, num_episodes)
        else:
            keep = self._complete_keep(layout)
            if int(keep.sum()) < target:
                return None
        return self._assemble(layout, keep)

    def close(self) -> None:
        self.env.close()
