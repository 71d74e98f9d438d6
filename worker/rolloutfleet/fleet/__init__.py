"""Processes: a worker process (:mod:`.worker`, which drives a runner and its Redis side in
:mod:`.worker_transport`), its probes, and the local fleet supervisor behind
``rolloutfleet run`` (:mod:`.supervisor`, with :mod:`.embedded_redis` and
:mod:`.parent_watch`).
"""
