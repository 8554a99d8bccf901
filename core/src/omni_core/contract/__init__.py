"""The contract: what a plugin and the core agree on, and nothing that runs a model.

- ``hookspecs``, ``registry`` (the typed specs a hook registers), ``host`` (discovery and
  loading of plugins: the one place that holds what they registered);
- ``pipeline`` (every member the core reads from a pipeline: the staged and streamed shapes the
  engine drives), ``types`` and ``messages`` (what requests carry and results hold),
  ``collect`` (deltas -> whole results), ``requests`` (the one request path), ``errors``;
- ``config`` and ``dtypes`` (validated settings), ``platforms`` (which device runs),
  ``attention`` (the dispatcher: a backend per platform and role), ``faces`` (how packages
  show their public names).

It imports no runtime, lane or shell module: every arrow points down to here. Its public names
are in the top-level face, :mod:`omni_core`.
"""
