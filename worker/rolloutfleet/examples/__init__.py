"""Example learners that use only RolloutFleet's public API (run them with ``python -m``)."""
