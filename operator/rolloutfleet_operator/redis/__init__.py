"""What the operator does in Redis: per-job users and their Secrets, the default Redis, stream metrics (the one admin module imports the Redis client)."""
