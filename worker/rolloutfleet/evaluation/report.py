"""Evaluation results in words, for ``rolloutfleet streams``: the newest versions of every
job that has any, one line each::

    default/cartpole: evaluation version 12: return 181.2 ± 12.5 (95 % CI, 20 episodes), length 181.2
"""

from __future__ import annotations

import re
from typing import Any

from rolloutfleet.evaluation.confidence import VersionSummary
from rolloutfleet.transport.evaluation_results import read_results
from rolloutfleet.transport.redis.keys import PREFIX, job_keys

RESULTS_PATTERN = PREFIX + ":{*}:evaluation"
_RESULTS = re.compile(r"^" + PREFIX + r":\{([^/{}]+)/([^/{}]+)\}:evaluation$")


def evaluation_lines(client: Any, versions: int = 3) -> list[str]:
    """The newest ``versions`` summaries of each job with evaluation results in this Redis."""
    jobs = set()
    for key in client.scan_iter(match=RESULTS_PATTERN, count=1000):
        match = _RESULTS.match(key.decode() if isinstance(key, bytes) else key)
        if match is not None:
            jobs.add((match.group(1), match.group(2)))
    lines = []
    for namespace, name in sorted(jobs):
        for summary in read_results(client, job_keys(namespace, name), count=versions):
            try:
                line = VersionSummary.from_json(summary).describe()
            except (KeyError, ValueError, TypeError):
                continue
            lines.append(f"{namespace}/{name}: evaluation {line}")
    return lines
