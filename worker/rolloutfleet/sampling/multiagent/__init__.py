"""Multi-agent sampling: the runner of a spec.multiAgent job, its acting per policy and its rows, the PettingZoo envs (Parallel and AEC) and the agent-to-policy mapping."""
