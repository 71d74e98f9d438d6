"""Kueue admission: the Workload a job is admitted through, and the API calls around it."""
