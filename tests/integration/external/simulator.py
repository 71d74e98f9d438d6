"""A simulator process that only uses PolicyClient: it steps gymnasium's CartPole itself and logs
every transition it saw and made (JSON lines), for tests to compare with the stream.

    python -m tests.integration.external.simulator ADDRESS LOG --seed 0 --episodes 3 [--vanish-after N]

``--vanish-after N``: one episode of N actions, then the process exits without ending it.
ADDRESS ``env``: the first of ``ROLLOUTFLEET_EXTERNAL_ADDRESSES`` (what ``rolloutfleet run`` hands
its command); the simulator waits for the server to listen.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import gymnasium as gym

from rolloutfleet.client import PolicyClient


def transition(
    episode: str, t: int, obs: Any, action: Any, reward: float, new_obs: Any, term: bool, trunc: bool
) -> str:
    return json.dumps({"eps_id": int(episode), "t": t, "obs": obs.tolist(), "action": action, "reward": reward,
                       "new_obs": new_obs.tolist(), "terminated": term, "truncated": trunc})  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("log")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--vanish-after", type=int, default=None)
    parser.add_argument("--inference", default="remote")
    args = parser.parse_args()
    env = gym.make("CartPole-v1")
    address = os.environ["ROLLOUTFLEET_EXTERNAL_ADDRESSES"].split(",")[0] if args.address == "env" else args.address
    client = PolicyClient(address, inference=args.inference, ship_every=16)
    deadline = time.monotonic() + 120
    while True:
        try:
            client.info()
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    with open(args.log, "w") as log:
        for k in range(args.episodes):
            obs, _ = env.reset(seed=args.seed + k)
            episode = client.start_episode()
            t = 0
            while True:
                action = client.get_action(episode, obs)
                new_obs, reward, terminated, truncated, _ = env.step(action)
                client.log_returns(episode, float(reward))
                log.write(transition(episode, t, obs, action, float(reward), new_obs, terminated, truncated) + "\n")
                log.flush()
                obs, t = new_obs, t + 1
                if args.vanish_after is not None and t == args.vanish_after:
                    os._exit(0)  # gone mid-episode: no end_episode, no close
                if terminated or truncated:
                    client.end_episode(episode, obs, truncated=truncated)
                    break
    client.close()


if __name__ == "__main__":
    main()
