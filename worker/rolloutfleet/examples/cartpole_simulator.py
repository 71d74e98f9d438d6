"""A simulator outside the fleet: CartPole stepped here, every action asked of the workers.

What a game engine or a robot rig does through :class:`rolloutfleet.PolicyClient`; here
``--clients`` threads each step their own CartPole-v1 and call the server for each action
(``inference="remote"``). Run it next to a fleet serving ``spec.env.external``::

    rolloutfleet run examples/cartpole-external.yaml -- sh -c \\
        'python -m rolloutfleet.examples.cartpole_simulator & exec python -m rolloutfleet.examples.ppo ...'

The addresses come from ``--address`` or ``ROLLOUTFLEET_EXTERNAL_ADDRESSES`` (what
``rolloutfleet run`` hands its command); clients spread over them. It stops when the server
stops serving (or is gone) or after ``--episodes`` episodes per client.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import gymnasium as gym

from rolloutfleet import PolicyClient
from rolloutfleet.client import PolicyClientError


def wait_for_server(client: PolicyClient, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.info()
            return
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def run_client(address: str, seed: int, episodes: int | None, returns: list[float], inference: str) -> None:
    """One simulator: episodes of CartPole, each step's action from the server (or, with
    ``inference="local"``, from the server's weights)."""
    env = gym.make("CartPole-v1")
    client = PolicyClient(address, inference=inference)
    wait_for_server(client, timeout_s=120)
    done_episodes = 0
    try:
        while episodes is None or done_episodes < episodes:
            obs, _ = env.reset(seed=seed + done_episodes)
            episode, total = client.start_episode(), 0.0
            while True:
                obs, reward, terminated, truncated, _ = env.step(client.get_action(episode, obs))
                client.log_returns(episode, float(reward))
                total += float(reward)
                if terminated or truncated:
                    client.end_episode(episode, obs, truncated=truncated)
                    break
            returns.append(total)
            done_episodes += 1
    except PolicyClientError as exc:
        if exc.status != 503:  # 503: the worker is stopping; so does the simulator
            raise
    except ConnectionError:
        pass  # the fleet is gone
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="CartPole stepped here, actions from a RolloutFleet job's workers.")
    parser.add_argument("--address", action="append", help="host:port of a worker (repeatable)")
    parser.add_argument("--clients", type=int, default=8, help="simulators (threads), each with its own CartPole")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per client (default: until stopped)")
    parser.add_argument("--inference", choices=["remote", "local"], default="remote", help="who acts")
    args = parser.parse_args(argv)
    addresses = args.address or [a for a in os.environ.get("ROLLOUTFLEET_EXTERNAL_ADDRESSES", "").split(",") if a]
    if not addresses:
        print("cartpole_simulator: give --address or set ROLLOUTFLEET_EXTERNAL_ADDRESSES", file=sys.stderr)
        return 2
    returns: list[float] = []
    threads = [
        threading.Thread(
            target=run_client, args=(addresses[i % len(addresses)], 1000 * i, args.episodes, returns, args.inference)
        )
        for i in range(args.clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(f"cartpole_simulator: {len(returns)} episodes, {args.clients} clients", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
