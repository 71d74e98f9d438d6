"""The reconcile loop: observe, plan, status, the API calls, and the runtime state between rounds."""
