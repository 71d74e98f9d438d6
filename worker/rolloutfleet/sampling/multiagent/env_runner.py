"""MultiAgentEnvRunner: several policies acting in multi-agent envs; one batch per policy.

Per vector step every agent with an observation is mapped to its policy
(``spec.multiAgent.policyMapping``, once per agent and episode), each policy acts for all of its
agents of all sub-envs in one batched call, then every sub-env steps with its dict of actions.
Transitions are per agent (:mod:`rolloutfleet.sampling.multiagent.rows`): a row opens when its
agent acts and closes when that agent next gets an observation (its ``new_obs``; the rewards
in between summed), so turn-based agents keep rows open across steps. When the episode ends
(``__all__``, no PettingZoo agent left, or ``maxEpisodeSteps``: truncated) open rows close with
the agent's last observation. Agents may join and leave mid-episode; no row pairs one
episode's observation with the next's. ``sample()`` (:class:`~rolloutfleet.sampling.runner_base.Runner`)
counts steps per ``countStepsBy`` and cuts completed rows.

>>> batch = MultiAgentEnvRunner(RolloutJob.from_file("examples/multiagent.yaml")).sample()  # doctest: +SKIP
>>> sorted(batch), batch.env_steps()                                                        # doctest: +SKIP
(['blue', 'red'], 800)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from rolloutfleet.data import batch as sb
from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.data.multiagent_batch import MultiAgentBatch
from rolloutfleet.inference.policy import Policy
from rolloutfleet.sampling.callbacks import Callbacks
from rolloutfleet.sampling.env.calls import ENV_CALL
from rolloutfleet.sampling.env.creators import derive_seed, episode_id_base
from rolloutfleet.sampling.multiagent.acting import PolicyActing
from rolloutfleet.sampling.multiagent.league_slots import LeagueSeats, OpponentSource, SlotTable
from rolloutfleet.sampling.multiagent.pettingzoo_env import MultiAgentEnvAdapter, MultiAgentStep, multiagent_env_creator
from rolloutfleet.sampling.multiagent.policy_mapping import (
    EpisodeInfo,
    PolicyMapper,
    multi_agent_spec,
    policy_seed_path,
    policy_spaces,
    policy_specs,
)
from rolloutfleet.sampling.multiagent.rows import Arrivals, PolicyRows, SubEnv
from rolloutfleet.sampling.runner_base import Runner
from rolloutfleet.spec.job import RolloutJob, SpecError

log = logging.getLogger(__name__)


class MultiAgentEnvRunner(Runner[MultiAgentBatch]):
    """Samples a multi-agent RolloutJob (``spec.multiAgent``) for one worker.

    Policies are built from ``spec.policy`` with each policy's overrides, for the spaces of
    the agents mapped to them (found through the env's ``possible_agents``; when no
    possible agent maps to a policy and all agents share their spaces, those).
    """

    def __init__(
        self,
        job: RolloutJob,
        worker_index: int = 0,
        num_workers: int | None = None,
        callbacks: Callbacks | None = None,
    ) -> None:
        multi = multi_agent_spec(job)
        super().__init__(job, worker_index, num_workers, callbacks, agent_steps=True)
        spec = job.spec
        self.multi_agent = multi
        self._create = multiagent_env_creator(spec.env, worker_index, self.num_workers)
        self.mapper = PolicyMapper(self.multi_agent)
        self.policies_to_train = self.multi_agent.trained_policies
        self.count_steps_by = self.multi_agent.count_steps_by
        self._max_episode_steps = self.multi_agent.max_episode_steps

        self._eps_base = episode_id_base(worker_index)
        self._eps_counter = 0
        try:
            envs = [self._create(j) for j in range(self.num_envs)]
        except SpecError:
            raise
        except Exception as exc:  # noqa: BLE001 - one line for the operator, not a traceback
            field = "spec.env.id" if spec.env.id is not None else "spec.env.entryPoint"
            raise SpecError(f"{field}: building the environment failed: {type(exc).__name__}: {exc}") from None
        self.subenvs = [SubEnv(env) for env in envs]
        self.agent_ids: list[str] = []
        self._agent_index: dict[Any, int] = {}
        for agent in envs[0].possible_agents:
            self._index_of(agent)
        self._rows: dict[str, PolicyRows] = {}
        self._checked: set[tuple[Any, str]] = set()
        # spec.league: the opponent's seats play snapshots, held in slots (policies built with
        # the others, never trained or published, whose rows are the opponent's); attach_league
        # gives the snapshots' source.
        self.league = None if spec.league is None else LeagueSeats(
            spec.league.opponent, spec.league.cached_policies, self.num_envs
        )  # fmt: skip
        self._build_policies(envs[0])
        self._acting = PolicyActing(self.policies, self._rows, self.sampling.clip_actions)
        if self.league is not None:
            self._acting.share_forward(self.league.opponent, self.league.slot_ids())
        self._arrivals = Arrivals()  # meanStd: this step's observations, filtered together
        self._started = False
        self._ended: dict[int, tuple[int, int]] = {}  # eps_id -> (env steps, agent steps), not yet cut
        self._env_steps_uncut = 0  # env steps since the last batch (truncate mode)
        self._completed_uncut = 0  # completed rows not yet cut (truncate mode, agent_steps)

    # -- construction helpers -----------------------------------------------------------

    def _index_of(self, agent: Any) -> int:
        index = self._agent_index.get(agent)
        if index is None:
            index = self._agent_index[agent] = len(self.agent_ids)
            self.agent_ids.append(str(agent))
        return index

    def _build_policies(self, env: MultiAgentEnvAdapter) -> None:
        """One Policy per id, for the spaces of the agents mapped to it (a probe episode of sub-env 0)."""
        specs = policy_specs(self.job)
        for policy_id, (obs_space, act_space) in policy_spaces(env, self.mapper, self.worker_index, specs).items():
            # meanStd: one filter per policy (its agents' observations), like RLlib's per-policy filters.
            policy = self._add_policy(policy_id, specs[policy_id], obs_space, act_space, (policy_seed_path(policy_id),))
            self._rows[policy_id] = PolicyRows(policy_id, policy, self.sampling.observation_filter == "meanStd")
            if self.league is not None and policy_id == self.league.opponent:
                for k, slot_id in enumerate(self.league.slot_ids()):
                    seeds = (policy_seed_path(policy_id), k + 1)
                    self._add_policy(slot_id, specs[policy_id], obs_space, act_space, seeds)

    def _map(self, sub: SubEnv, env_index: int, agent: Any) -> str:
        """The agent's policy for this episode (the mapper's answer, checked once per agent and policy)."""
        policy_id = self.mapper(agent, EpisodeInfo(env_index, sub.eps_id, self.worker_index))
        if (agent, policy_id) not in self._checked:
            policy = self.policies[policy_id]
            obs_space, act_space = sub.env.observation_space(agent), sub.env.action_space(agent)
            if obs_space != policy.observation_space or act_space != policy.action_space:
                raise SpecError(
                    f"spec.multiAgent.policyMapping: agent {agent!r} (observations {obs_space}, actions {act_space}) "
                    f"is mapped to policy {policy_id!r}, built for observations {policy.observation_space} and "
                    f"actions {policy.action_space}"
                )
            self._checked.add((agent, policy_id))
        sub.mapping[agent] = policy_id
        return policy_id

    # -- episodes -------------------------------------------------------------------------

    def _new_eps_id(self) -> int:
        self._eps_counter += 1
        return self._eps_base | self._eps_counter

    def _reset(self, env_index: int, seed: int | None) -> None:
        sub = self.subenvs[env_index]
        with ENV_CALL.calling("reset", env_index):
            obs = sub.env.reset(seed=seed)
        sub.start(obs, self._new_eps_id())
        if self.league is not None:
            self.league.start(env_index, self.subenvs, self._acting.load_slot)
        if self.filters:
            for agent, agent_obs in obs.items():
                policy_id = sub.mapping.get(agent) or self._map(sub, env_index, agent)
                self._arrivals.add(policy_id, agent_obs, -1, obs, agent)
        if self._call_start:
            self.callbacks.on_episode_start(runner=self, env_index=env_index, eps_id=sub.eps_id)

    def attach_league(self, source: OpponentSource) -> None:
        """Where ``spec.league``'s snapshots come from (the worker's Redis); until attached,
        the opponent plays as it is."""
        if self.league is None:
            raise SpecError("spec.league: this job has no league to attach a source of snapshots to")
        self.league.source = source

    def slots_act_only(self) -> bool:
        """Whether the league's slots need only what acting needs of a snapshot (the default
        MLP without its value function): they act in one shared pass and the opponent's rows
        are not published (``publishOpponentRows``), so nobody reads their ``vf_preds``,
        which are then NaN for the games a snapshot's acting part played."""
        league = self.job.spec.league
        return league is not None and not league.publish_opponent_rows and self._acting.slots_banked

    def _policy(self, policy_id: str) -> Policy:
        self._acting.sync_slots([policy_id])  # a league slot's snapshot loaded into the shared pass only
        return super()._policy(policy_id)

    @property
    def slots(self) -> SlotTable | None:
        """``spec.league``'s slots: which snapshot each holds."""
        return None if self.league is None else self.league.table

    def _start(self) -> None:
        for j in range(self.num_envs):
            self._reset(j, derive_seed(self._seed, self.worker_index, j, self.stats.env_restarts))
        self._arrivals.filter(self._rows, self.filters)
        self._started = True

    def _close_row(self, policy_id: str, row: int, new_obs: Any, terminated: bool, truncated: bool) -> None:
        """``new_obs``: the agent's next observation as the env gave it, or None for its row's own."""
        rows = self._rows[policy_id]
        rows.set_new_obs(row, new_obs)
        rows.terminateds[row] = terminated
        rows.truncateds[row] = truncated
        rows.complete[row] = True
        self._completed_uncut += 1

    def _episode_ended(self, env_index: int, sub: SubEnv, terminated: bool, truncated: bool) -> None:
        # Rows still open get the agent's last observation: there is no next one.
        for policy_id, row in sub.open.values():
            self._close_row(policy_id, row, None, terminated, truncated and not terminated)
        sub.open = {}
        self._ended[sub.eps_id] = (sub.length, sub.rows)
        total, keyed = sub.episode_returns()
        self.stats.episode(total, sub.length, keyed)
        if self.league is not None:
            self.league.finished(sub)
        if self._call_end:
            self.callbacks.on_episode_end(
                runner=self,
                env_index=env_index,
                eps_id=sub.eps_id,
                episode_return=total,
                episode_length=sub.length,
                terminated=terminated,
                truncated=truncated,
            )
        self._end_custom_metrics(env_index, ended=True)
        self._reset(env_index, None)

    def _drop_episode(self, env_index: int, exc: Exception) -> None:
        """The sub-env raised: forget its episode's rows, rebuild it (or re-raise, per spec)."""
        self._env_failures.failed(env_index, exc)  # raises at the limit
        log.warning("sub-env %d raised %s: %s; recreating it", env_index, type(exc).__name__, exc)
        sub = self.subenvs[env_index]
        for policy_id, rows in self._rows.items():
            if (dropped := rows.drop(sub.eps_id)) is not None:
                completed, remap = dropped
                self._completed_uncut -= completed
                self._remap_open(policy_id, remap)
                self._arrivals.remap(policy_id, remap)
        sub.open = {}
        try:
            sub.env.close()
        except Exception:
            log.debug("closing failed sub-env %d raised", env_index, exc_info=True)
        self.stats.env_restarts += 1
        self.stats.period.dropped += 1
        self._end_custom_metrics(env_index, ended=False)
        sub.env = self._create(env_index)
        self._reset(env_index, derive_seed(self._seed, self.worker_index, env_index, self.stats.env_restarts))

    def _remap_open(self, policy_id: str, remap: np.ndarray) -> None:
        for sub in self.subenvs:
            for agent, (pid, row) in sub.open.items():
                if pid == policy_id:
                    sub.open[agent] = (pid, int(remap[row]))

    # -- the step loop ----------------------------------------------------------------------

    def _vector_step(self) -> None:
        """One step of every sub-env: group acting agents by policy, act, step, record."""
        subenvs = self.subenvs
        groups = self._group_by_policy()
        actions: list[dict[Any, Any]] = [{} for _ in subenvs]
        league = self.league
        for policy_id, (envs, agents, obs_list) in groups.items():
            if league is not None and policy_id == league.opponent and league.source is not None:
                # the games' snapshots (or the opponent as it is) acting into the opponent's rows
                for passed in self._acting.act_league(policy_id, league.slot_ids(), envs, agents, obs_list, subenvs):
                    self._opened(policy_id, *passed, actions)
            else:
                self._act_for(policy_id, envs, agents, obs_list, actions)
        # step every sub-env and close the rows whose agents got their next observation
        clip_rewards = self.sampling.clip_rewards
        for j, sub in enumerate(subenvs):
            try:
                with ENV_CALL.calling("step", j):
                    result = sub.env.step(actions[j])
            except Exception as exc:  # noqa: BLE001 - any env error: rebuild (or re-raise, per spec)
                self._drop_episode(j, exc)
                continue
            self._record(j, sub, result, clip_rewards, actions[j])
            if self._env_failures.streak:
                self._env_failures.succeeded(j)
        if self.filters:
            self._arrivals.filter(self._rows, self.filters)
        n = len(subenvs)
        self._env_steps_uncut += n
        self.stats.period.env_steps += n
        self.stats.period.agent_steps += sum(len(group[0]) for group in groups.values())

    def _group_by_policy(self) -> dict[str, tuple[list[int], list[Any], list[Any]]]:
        """Who acts, grouped by policy: (env index, agent, obs) in parallel lists."""
        groups: dict[str, tuple[list[int], list[Any], list[Any]]] = {}
        for j, sub in enumerate(self.subenvs):
            mapping = sub.mapping
            for agent, obs in sub.obs.items():
                policy_id = mapping.get(agent)
                if policy_id is None:
                    policy_id = self._map(sub, j, agent)
                group = groups.get(policy_id)
                if group is None:
                    group = groups[policy_id] = ([], [], [])
                group[0].append(j)
                group[1].append(agent)
                group[2].append(obs)
        return groups

    def _act_for(
        self, policy_id: str, envs: list[int], agents: list[Any], obs_list: list[Any], actions: list[dict[Any, Any]]
    ) -> None:
        """One batched forward pass of ``policy_id`` for its acting agents: their rows opened
        (episode, ``t``, agent index), their actions into ``actions`` (per sub-env, by agent)."""
        self._opened(
            policy_id, envs, agents, self._acting.act(policy_id, envs, agents, obs_list, self.subenvs), actions
        )

    def _opened(
        self, policy_id: str, envs: list[int], agents: list[Any], taken: tuple[int, Any], actions: list[dict[Any, Any]]
    ) -> None:
        """``policy_id`` acted for ``agents``: rows ``start:`` of ``taken`` opened, its actions in ``actions``."""
        subenvs, (start, env_action) = self.subenvs, taken
        columns = self._rows[policy_id].columns
        eps_col, t_col, index_col = columns[sb.EPS_ID], columns[sb.T], columns[sb.AGENT_INDEX]
        agent_index = self._agent_index
        for offset, (j, agent) in enumerate(zip(envs, agents, strict=True)):
            sub, row = subenvs[j], start + offset
            eps_col[row] = sub.eps_id
            t_col[row] = sub.agent_t.get(agent, 0)
            index = agent_index.get(agent)
            index_col[row] = self._index_of(agent) if index is None else index
            actions[j][agent] = env_action[offset]
            sub.open[agent] = (policy_id, row)
            sub.rows += 1

    def _record(
        self,
        env_index: int,
        sub: SubEnv,
        result: MultiAgentStep,
        clip_rewards: float | None,
        actions: Mapping[Any, Any],
    ) -> None:
        if sub.length + 1 >= self._max_episode_steps and not (result.episode_terminated or result.episode_truncated):
            result = sub.env.cut(result)  # spec.multiAgent.maxEpisodeSteps: the episode ends here, truncated
            self.stats.period.truncated_by_max_steps += 1
        obs, rewards, terminateds, truncateds, ended_term, ended_trunc = result
        if self._call_step:
            self.callbacks.on_episode_step(
                runner=self, env_index=env_index, eps_id=sub.eps_id, action=actions, reward=rewards, new_obs=obs
            )
        sub.length += 1
        open_rows, policy_rows, returns = sub.open, self._rows, sub.returns
        for agent, reward in rewards.items():
            returns[agent] = returns.get(agent, 0.0) + float(reward)
            ref = open_rows.get(agent)
            if ref is not None:
                value = reward if clip_rewards is None else min(max(reward, -clip_rewards), clip_rewards)
                policy_rows[ref[0]].rewards[ref[1]] += value
        next_obs: dict[Any, Any] = {}
        filters = self.filters
        for agent, agent_obs in obs.items():
            # The episode's end ("__all__") ends every agent's row, flagged or not.
            terminated = bool(terminateds.get(agent, False)) or ended_term
            truncated = (bool(truncateds.get(agent, False)) or ended_trunc) and not terminated
            ref = open_rows.pop(agent, None)
            if ref is not None:
                self._close_row(ref[0], ref[1], agent_obs, terminated, truncated)
                sub.agent_t[agent] = sub.agent_t.get(agent, 0) + 1
            done = terminated or truncated
            if not done:
                next_obs[agent] = agent_obs
            if filters:
                policy_id = ref[0] if ref is not None else sub.mapping.get(agent) or self._map(sub, env_index, agent)
                self._arrivals.add(
                    policy_id, agent_obs, -1 if ref is None else ref[1], None if done else next_obs, agent
                )
        # Agents done without a last observation keep their own as new_obs.
        for flags in (terminateds, truncateds):
            for agent, done in flags.items():
                if done and agent in open_rows:
                    policy_id, row = open_rows.pop(agent)
                    self._close_row(
                        policy_id,
                        row,
                        None,
                        bool(terminateds.get(agent, False)),
                        bool(truncateds.get(agent, False)),
                    )
                    sub.agent_t[agent] = sub.agent_t.get(agent, 0) + 1
        sub.obs = next_obs
        if ended_term or ended_trunc:
            self._episode_ended(env_index, sub, ended_term, ended_trunc)

    # -- cutting batches ---------------------------------------------------------------------

    def _cut(self, chosen: set[int] | None, env_steps: int) -> MultiAgentBatch:
        """Every completed row (of the ``chosen`` episodes only, when given) as a batch."""
        batches: dict[str, SampleBatch] = {}
        agent_ids = np.asarray(self.agent_ids) if self.agent_ids else np.zeros(0, "<U1")
        eps_ids = None if chosen is None else np.fromiter(chosen, np.int64, len(chosen))
        for policy_id, rows in self._rows.items():
            batches[policy_id], remap = rows.cut(eps_ids, agent_ids)
            self._completed_uncut -= len(batches[policy_id])
            self._remap_open(policy_id, remap)
        seq_nos = {policy_id: policy.weights_seq_no for policy_id, policy in self.policies.items()}
        batch = MultiAgentBatch(batches, env_steps, self.agent_ids, seq_nos)
        self.stats.lifetime_env_steps += env_steps
        self.stats.lifetime_agent_steps += batch.agent_steps()
        return batch

    # -- the hooks of Runner.sample() ---------------------------------------------------------

    def _begin_sample(self, explore: bool | None, random_actions: bool) -> None:
        if not self._started:
            self._start()
        self._acting.begin(explore, random_actions)

    def _step(self, steps: int) -> None:
        for _ in range(steps):
            self._vector_step()

    def _steps_missing(self, target: int) -> int:
        if self.count_steps_by == "env_steps":
            return -(-max(0, target - self._env_steps_uncut) // self.num_envs)
        return int(self._completed_uncut < target)  # agent steps: completed rows, one step at a time

    def _cut_truncated(self, target: int) -> MultiAgentBatch:
        env_steps, self._env_steps_uncut = self._env_steps_uncut, 0
        self._ended.clear()
        return self._cut(None, env_steps)

    def _cut_episodes(self, num_episodes: int | None, target: int) -> MultiAgentBatch | None:
        if num_episodes is not None:
            if len(self._ended) < num_episodes:
                return None
            chosen = list(self._ended)[:num_episodes]
        else:
            by_env = self.count_steps_by == "env_steps"
            counted = sum(steps[0] if by_env else steps[1] for steps in self._ended.values())
            if counted < target or not self._ended:
                return None
            chosen = list(self._ended)
        env_steps = sum(self._ended[eps][0] for eps in chosen)
        for eps in chosen:
            del self._ended[eps]
        return self._cut(set(chosen), env_steps)

    def close(self) -> None:
        for sub in self.subenvs:
            sub.env.close()
