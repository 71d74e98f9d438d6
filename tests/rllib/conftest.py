"""The RLlib tier runs in the RLlib venv (`make test-rllib`, part of `make test`): RLlib 2.60 pins
gymnasium 1.2.2, the project's venv has 1.4.0. The integration tier's real ``redis-server``
fixtures (missing: skipped on a laptop, a failure under ``CI=true``)."""

from tests.integration.conftest import redis_server, redis_url

__all__ = ["redis_server", "redis_url"]
