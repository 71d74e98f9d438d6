"""The Redis backend of the transport: everything that speaks Redis's protocol and knows its
failures. :mod:`.connection` (clients of a plain Redis or a Redis Cluster, told apart there),
:mod:`.retry` (which errors mean "Redis is away", the retry loop), :mod:`.client_options`,
:mod:`.gather` (one system call a command), :mod:`.reachability` (start-up checks),
:mod:`.sharding` (a job's batch streams), :mod:`.backpressure` and :mod:`.room` (the wait
for room and its Lua scripts), :mod:`.stream_status` and :mod:`.stream_backlog` (what a
job's streams hold). The sides above (publisher, consumer, weights, heartbeats) use it.
"""
