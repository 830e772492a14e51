"""Our reads and rewrites against Spark itself, on checkpoints written by real queries: Spark's built-in
``statestore`` and ``state-metadata`` readers for reads, and the query restarted from a rewritten
checkpoint for rewrites."""
