"""The rules the operator and the local fleet (``rolloutfleet run``) share, beside the manifest
model (:mod:`rolloutfleet.spec`): the autoscaler and its signals, restart backoff, which
workers load torch, a worker's process settings, and how a worker's refused weights and
missing modules are reported. Pure: no torch, gymnasium, numpy or Redis."""
