"""The worker count: the /scale subresource, the autoscaler's tick and its custom metrics."""
