"""EnvRunner: step a vector of environments with a policy, return SampleBatches.

What RLlib's ``SingleAgentEnvRunner`` does for one process, with a fraction of the machinery.
The hot loop (:meth:`EnvRunner._run_steps`) only acts (:mod:`rolloutfleet.sampling.vector_policy`),
steps and writes what the env returned into preallocated ``(steps, num_envs)`` column buffers
(:mod:`rolloutfleet.sampling.grid`: one numpy assignment per column per vector step). Which rows
are transitions, episode ids, ``t``, returns and lengths are computed for a chunk of steps at
once (:mod:`rolloutfleet.sampling.episode_clock`), so no row pairs the last observation of one
episode with the first of the next under either gymnasium autoreset mode. ``sample()``
(:class:`~rolloutfleet.sampling.runner_base.Runner`) cuts its batch, env-major, from the valid rows.

>>> job = RolloutJob.from_dict({"metadata": {"name": "cp"}, "spec": {"env": {"id": "CartPole-v1", "numEnvs": 4}}})
>>> len(EnvRunner(job).sample())    # numEnvs x rolloutFragmentLength
800
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from time import perf_counter
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from rolloutfleet.data import batch as sb
from rolloutfleet.data.batch import DEFAULT_POLICY, SampleBatch
from rolloutfleet.inference.exploration import OrnsteinUhlenbeckNoise
from rolloutfleet.inference.obs_spaces import ObsParts
from rolloutfleet.sampling.callbacks import Callbacks
from rolloutfleet.sampling.env.creators import derive_seed, episode_id_base
from rolloutfleet.sampling.episode_clock import EpisodeClock
from rolloutfleet.sampling.grid import RAW_REWARDS, SEQ_NO, VALID, Grid, batch_columns, grid_columns
from rolloutfleet.sampling.info_columns import InfoColumns
from rolloutfleet.sampling.row_callbacks import RowCallbacks
from rolloutfleet.sampling.runner_base import Runner
from rolloutfleet.sampling.vector.choice import VectorChoice, plan_vectorization
from rolloutfleet.sampling.vector.make import make_vector_env
from rolloutfleet.sampling.vector.sync import FAILED
from rolloutfleet.sampling.vector_policy import VectorPolicy
from rolloutfleet.spec.job import RolloutJob, SpecError

log = logging.getLogger(__name__)

STEP_COLUMNS = (
    sb.ACTIONS,
    sb.ACTION_LOGP,
    sb.ACTION_DIST_INPUTS,
    sb.VF_PREDS,
    sb.TERMINATEDS,
    sb.TRUNCATEDS,
    sb.REWARDS,
)
"""The grid columns the hot loop writes every step (env_id, the tick and weights_seq_no are per grid row)."""


class EnvRunner(Runner[SampleBatch]):
    """Samples experience for one worker of a RolloutJob.

    ``worker_index`` (0-based) and ``num_workers`` (default ``spec.replicas``) go into
    every sub-env's :class:`~rolloutfleet.sampling.env.creators.EnvContext` and into the derived seeds.
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
                "spec.multiAgent: a multi-agent job samples with rolloutfleet.sampling.multiagent.env_runner.MultiAgentEnvRunner "
                "(rolloutfleet.fleet.runner_factory.make_env_runner picks the right runner for a job)"
            )
        super().__init__(job, worker_index, num_workers, callbacks)
        # auto times a throwaway sub-env here; a rebuilt vector env keeps the choice
        self.vector_choice = plan_vectorization(spec.env, worker_index, self.num_workers, spec.resources.cpu)
        info_keys = self.sampling.infos
        if info_keys and self.vector_choice.mode == "async":  # auto's choice; async passes no step infos
            self.vector_choice = VectorChoice("sync", sub_envs=spec.env.num_envs, reason="auto: sampling.infos")
        self.vectorization = self.vector_choice.mode
        self.explore = spec.policy.explore
        self.env = make_vector_env(spec.env, worker_index, self.num_workers, self.vector_choice, info_keys)
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
        n = self.num_envs
        # NEXT_STEP with action masks: a reset step acts on its episode's final observation, whose
        # mask may allow nothing (a finished game); its action is ignored and its row dropped.
        exempt = np.zeros(n, np.bool_) if self.parts.masked and not self._same_step else None
        # Stateful models: one state per sub-env, restarted with each episode (as the OU noise is).
        self._vector_policy = VectorPolicy(self.policy, n, exempt)
        obs_dtype = np.float32 if self.filter is not None else self.observation_space.dtype
        leaves = {path: (leaf.shape or (), leaf.dtype) for path, leaf in self.parts.leaves} or None
        state, state_names = self._vector_policy.state_init, self._vector_policy.state_names
        specs = grid_columns(self.policy, state, state_names, raw_rewards=self.sampling.clip_rewards is not None)
        self._grid = Grid(n, specs, self.observation_space.shape or (), obs_dtype, leaves)
        self._batch_names = batch_columns(self.policy, state_names)
        calls = (self._call_start, self._call_step, self._call_end)
        self._row_callbacks = (
            RowCallbacks(self, self._grid, calls, self._end_custom_metrics) if self._per_step else None
        )
        self._infos = InfoColumns(info_keys, self._grid) if info_keys else None  # sampling.infos
        self._obs: np.ndarray | None = None
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
            self._end_custom_metrics(int(i), ended=False)
        self._start_episodes(np.asarray(env_indices))

    def _filter(self, obs: np.ndarray, update: bool = True) -> np.ndarray:
        if self.filter is None:
            return obs
        return self.filter(obs, update=update)

    # -- the hot loop -----------------------------------------------------------------

    def _run_steps(self, start: int, steps: int, explore: bool, random_actions: bool) -> None:
        """Step all sub-envs ``steps`` times, writing grid rows ``start`` onwards: the hot path (tens of µs
        per vector step at 64 envs): act, step, one numpy assignment per column. Episode bookkeeping runs
        over the whole chunk afterwards (:meth:`_account`), earlier only on env failures or callbacks."""
        cols = self._ready_grid(start + steps)
        c_act, c_logp, c_dist, c_vf, c_term, c_trunc, c_rew = (cols[name] for name in STEP_COLUMNS)
        c_raw = cols.get(RAW_REWARDS)
        clip_rewards, obs_filter, clip, per_step = self.sampling.clip_rewards, self.filter, self._clip, self._per_step
        resilient, put, infos = self.vectorization == "sync", self._grid.obs_writer(), self._infos
        pending = self._clock.pending  # sub-envs whose next step is a reset step
        act, act_stateful, noise, ended, exempt = self._vector_policy.actors(explore, random_actions, cols, pending)
        env_step, obs, accounted = self.env.step, self._obs, start  # rows before `accounted`: bookkeeping done
        assert obs is not None  # _ready_grid set it
        put(start, obs)
        inference_s = env_wait_s = 0.0  # StepTiming's sums: three clock reads per vector step
        for s in range(start, start + steps):
            began = perf_counter()
            actions, logp, dist_inputs, values = act(obs) if act_stateful is None else act_stateful(obs, s)
            acted = perf_counter()
            try:
                next_obs, rewards, terminateds, truncateds, info = env_step(
                    actions if clip is None else np.clip(actions, clip[0], clip[1])
                )
            except Exception as exc:  # noqa: BLE001 - any env error: rebuild (or re-raise, per spec)
                accounted = self._vector_env_failed(exc, accounted, s, noise, ended)
                env_step, obs = self.env.step, self._obs
                continue
            stepped = perf_counter()
            inference_s += acted - began
            env_wait_s += stepped - acted
            c_act[s] = actions
            c_logp[s] = logp
            c_dist[s] = dist_inputs
            c_vf[s] = values
            c_term[s] = terminateds
            c_trunc[s] = truncateds
            if exempt is not None:
                np.logical_or(terminateds, truncateds, out=exempt)
            if ended is not None:
                ended = self._restart_episodes(ended, terminateds | truncateds, noise)
            if c_raw is None:
                c_rew[s] = rewards
            else:
                c_raw[s] = rewards
                np.clip(rewards, -clip_rewards, clip_rewards, out=c_rew[s])  # type: ignore[operator]
            if obs_filter is not None:
                next_obs = obs_filter(next_obs)
            put(s + 1, next_obs)
            obs = next_obs
            if infos is not None:
                infos.record(s, info)
            if info:
                accounted = self._read_info(s, info, accounted, noise, resilient)
            if per_step:
                accounted = self._account(accounted, s + 1)
        self._account(accounted, start + steps)
        self._obs = obs
        self.step_timing.add(inference_s, env_wait_s, steps)

    def _ready_grid(self, rows: int) -> dict[str, np.ndarray]:
        """Room for ``rows`` grid rows and a first observation (the envs' first reset): the grid's columns."""
        self._grid.ensure_capacity(rows)
        if self._obs is None:
            self._reset_envs()
        return self._grid.columns

    def _restart_episodes(
        self, ended: np.ndarray, done: np.ndarray, noise: OrnsteinUhlenbeckNoise | None
    ) -> np.ndarray:
        """Ornstein-Uhlenbeck noise and a model's state restart with each episode: after the step
        that ended it (SAME_STEP), or after the reset step that follows (NEXT_STEP). ``ended``:
        the sub-envs whose previous step ended an episode; returns ``done``, this step's."""
        starts = done if self._same_step else ended
        if noise is not None:
            noise.reset(starts)
        self._vector_policy.restart_state(starts)
        return done

    def _read_info(
        self, s: int, info: Mapping[str, Any], accounted: int, noise: OrnsteinUhlenbeckNoise | None, resilient: bool
    ) -> int:
        """Row ``s``'s info: SAME_STEP final observations, sub-envs that failed (sync mode: their
        episodes are dropped, the sub-envs rebuilt). Returns the first row not yet accounted."""
        if self._same_step and "_final_obs" in info:
            self._grid.keep_final_obs(s, info, self.filter)
        failed = info.get(FAILED) if resilient else None
        if failed is None:
            return accounted
        self._account(accounted, s + 1, failed)
        self.stats.env_restarts += int(failed.sum())
        self._drop_episodes(failed.nonzero()[0], s)
        if noise is not None:
            noise.reset(failed)
        self._vector_policy.restart_state(failed)
        return s + 1

    def _vector_env_failed(
        self, exc: Exception, accounted: int, s: int, noise: OrnsteinUhlenbeckNoise | None, ended: np.ndarray | None
    ) -> int:
        """The whole vector env raised at row ``s``: account the rows before, rebuild the env, restart
        every episode (noise, state). Returns the first row not yet accounted."""
        self._account(accounted, s)
        self._restart_vector_env(exc, s)
        everyone = np.ones(self.num_envs, np.bool_)
        if noise is not None:
            noise.reset(everyone)
        self._vector_policy.restart_state(everyone)
        if ended is not None:  # the rebuilt env's next step is its episodes' first, not a reset step
            ended[:] = False
        if self._vector_policy.mask_exempt is not None:
            self._vector_policy.mask_exempt[:] = False
        return s + 1

    def _account(self, a: int, b: int, failed: np.ndarray | None = None) -> int:
        """Episode bookkeeping for grid rows ``[a, b)`` (:meth:`EpisodeClock.advance`): their
        ``_valid``, ``eps_id`` and ``t`` columns, and the episodes that ended (returns, lengths,
        callbacks), in the order they ended. ``failed`` marks sub-envs whose last row is not a
        transition (their episodes are dropped by the caller). Returns ``b``, the first row not accounted."""
        if b <= a:
            return b
        cols = self._grid.columns
        rewards = cols[sb.REWARDS if RAW_REWARDS not in cols else RAW_REWARDS][a:b]
        ended = self._clock.advance(
            cols[sb.TERMINATEDS][a:b], cols[sb.TRUNCATEDS][a:b], rewards,
            cols[VALID][a:b], cols[sb.EPS_ID][a:b], cols[sb.T][a:b], failed,
        )  # fmt: skip
        self.stats.lifetime_env_steps += ended.transitions
        self.stats.period.env_steps += ended.transitions
        self.stats.episodes(ended.returns, ended.lengths)
        if self._row_callbacks is not None:
            self._row_callbacks(a, cols[VALID][a:b], ended)
        return b

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
        self.env = make_vector_env(
            self.job.spec.env, self.worker_index, self.num_workers, self.vector_choice, self.sampling.infos
        )
        self._drop_episodes(np.arange(self.num_envs), step)
        obs, _ = self.env.reset(seed=self._reset_seed())
        self._obs = self._filter(obs)
        self._grid.obs_writer()(step + 1, self._obs)
        self._clock.pending[:] = False

    def _reset_seed(self) -> Any:
        if self.vectorization == "vector":
            return derive_seed(self._seed, self.worker_index, self.stats.env_restarts)
        return [derive_seed(self._seed, self.worker_index, j, self.stats.env_restarts) for j in range(self.num_envs)]

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
        return self._grid.cut(layout, layout.flat <= last, self._names())

    def _cut_episodes(self, num_episodes: int | None, target: int) -> SampleBatch | None:
        layout = self._grid.layout()
        if num_episodes is not None:
            if int(self._grid.ended(layout).sum()) < num_episodes:
                return None
            keep = self._grid.complete_keep(layout, num_episodes)
        else:
            keep = self._grid.complete_keep(layout)
            if int(keep.sum()) < target:
                return None
        return self._grid.cut(layout, keep, self._names())

    def _names(self) -> list[str]:
        """The batch's columns: ``sampling.infos``' last (they exist once each key had a value)."""
        return self._batch_names if self._infos is None else self._batch_names + self._infos.batch_names()

    def close(self) -> None:
        self.env.close()
