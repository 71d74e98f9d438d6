"""The ``rolloutfleet`` command: :mod:`.main` parses and dispatches; :mod:`.run` is
``rolloutfleet run``, :mod:`.streams` ``streams`` and ``consume``.
"""
