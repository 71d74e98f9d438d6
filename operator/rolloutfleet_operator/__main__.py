"""``python -m rolloutfleet_operator`` (or ``rolloutfleet-operator``): run the operator.

    rolloutfleet-operator --all-namespaces
    rolloutfleet-operator --namespace team-a --namespace team-b --liveness-port 8080 --metrics-port 9090

Several replicas may run: kopf peering (the ``rolloutfleet`` KopfPeering objects the
chart installs) keeps exactly one active. ``--standalone`` skips peering.
"""

from __future__ import annotations

import argparse
import logging
import sys

import kopf
from prometheus_client import start_http_server

from rolloutfleet_operator.config import ConfigError, OperatorConfig


def build_parser() -> argparse.ArgumentParser:
    """The operator's command line (also rendered into the docs' CLI reference)."""
    parser = argparse.ArgumentParser(prog="rolloutfleet-operator", description=__doc__.split("\n\n")[0])
    scope = parser.add_mutually_exclusive_group(required=True)
    scope.add_argument("--all-namespaces", action="store_true", help="watch RolloutJobs in every namespace")
    scope.add_argument("--namespace", action="append", metavar="NS", help="watch this namespace (repeatable)")
    parser.add_argument("--standalone", action="store_true", help="no peering: this replica always acts")
    parser.add_argument("--liveness-port", type=int, default=8080, help="kopf's /healthz (0: none)")
    parser.add_argument("--metrics-port", type=int, default=9090, help="Prometheus /metrics (0: none)")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default="info")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    import os

    try:
        OperatorConfig.from_environ(os.environ)  # fail here, with the variable's name, not in a handler
    except ConfigError as error:
        print(f"rolloutfleet-operator: {error}", file=sys.stderr)
        return 2
    import rolloutfleet_operator.handlers  # noqa: F401 - registers the handlers

    if args.metrics_port:
        start_http_server(args.metrics_port)
    kopf.configure(verbose=args.log_level == "debug", quiet=args.log_level in ("warning", "error"))
    kopf.run(
        clusterwide=args.all_namespaces,
        namespaces=args.namespace or (),
        standalone=args.standalone,
        liveness_endpoint=f"http://0.0.0.0:{args.liveness_port}/healthz" if args.liveness_port else None,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
