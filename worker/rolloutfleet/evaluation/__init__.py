"""Evaluation workers (``spec.evaluation``): judge each weights version by whole greedy episodes.

:mod:`.confidence` (the summary of a version's episodes), :mod:`.episodes` (playing them),
:mod:`.evaluator` (the worker process), :mod:`.local` (``rolloutfleet evaluate``). Results
travel through :mod:`rolloutfleet.transport.evaluation_results`.
"""
