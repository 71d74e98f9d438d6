"""Adapters to learners people already have; each is an optional extra, imported only by name
(``import rolloutfleet`` loads none of them): :mod:`.torchrl` (``rolloutfleet[torchrl]``)."""
