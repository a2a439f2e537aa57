"""The benchmark suite behind ``mplex bench`` and ``make bench`` (not part of the API)."""
