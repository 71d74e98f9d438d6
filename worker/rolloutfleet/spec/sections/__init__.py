"""The RolloutJob's sections, one model each (spec.env, spec.policy, spec.sampling, spec.redis, spec.autoscaling, ...): rolloutfleet.spec.job composes them into the manifest."""
