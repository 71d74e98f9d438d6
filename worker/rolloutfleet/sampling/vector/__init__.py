"""The vector env backends (``spec.env.vectorization``), one module each: :mod:`.sync`
(in-process, failing sub-envs restarted), :mod:`.processes` (``async``: sub-envs in worker
processes), :mod:`.envpool` (EnvPool's C++ pools), :mod:`.native` (``vector``: the env's own
batched implementation); :mod:`.choice` picks one (``auto``), and :mod:`.backends` is the
registry :func:`rolloutfleet.sampling.vector.make.make_vector_env` builds from. A new backend is one
module here plus one entry in :data:`.backends.BACKENDS` (and the CRD's enum).
"""
