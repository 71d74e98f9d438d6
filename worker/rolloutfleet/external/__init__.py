"""External envs: workers that serve actions to simulators running on their own.

A job with ``spec.env.external`` (:mod:`rolloutfleet.spec.sections.external`) gets an
:class:`~rolloutfleet.external.runner.ExternalRunner` from the runner factory: it listens on
the job's port (:mod:`rolloutfleet.external.server`), batches inference over its clients'
waiting observations, keeps their episodes (:mod:`rolloutfleet.external.book`) and hands the
worker loop fragments of their rows, published like any worker's. Simulators call it through
:class:`rolloutfleet.client.PolicyClient`.
"""
