"""Reference pages generated from the source, so they cannot drift: the RolloutJob fields
from the CRD's schema (:mod:`.crd`), the command lines from their argparse parsers
(:mod:`.cli`), the Prometheus series from the registries (:mod:`.metrics`). :mod:`.hooks`
hands them to mkdocs at build time (``make docs``); nothing generated is committed."""
