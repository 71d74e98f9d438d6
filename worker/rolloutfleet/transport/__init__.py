"""Everything that talks to Redis, and what a learner imports: :mod:`.publisher` (batches →
a stream), :mod:`.consumer` / :mod:`.reader` (stream → batches), :mod:`.weights` (versioned
weights both ways), :mod:`.filter_sync` (fleet-wide filter statistics), :mod:`.heartbeat`
and, under them, :mod:`.redis`: the Redis backend (clients, retryable errors, scripts). Needs
no gymnasium.
"""
