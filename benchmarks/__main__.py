"""``python -m benchmarks``: the benchmark suite with every baseline (``make bench``).

The engine lives in the package (``mplex._bench``) so that ``mplex bench`` works from an
installed wheel too; this folder adds what only a source checkout has: the js-libp2p
and py-libp2p baselines, RESULTS.md (``benchmarks/results.py``) and saved results.
"""

import sys

from benchmarks.results import main

sys.exit(main())
