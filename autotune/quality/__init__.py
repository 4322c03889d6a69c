"""Output quality: does a tuned configuration answer like the engine's defaults?

A fixed, seeded probe set (probes.py) is answered greedily with top-k log-probabilities by the
baseline configuration (the reference) and by every guarded candidate; compare.py measures how
far a candidate's answers drift (token agreement, first divergence, KL of the top-k
distributions) and limits.py decides whether that is within the sweep's quality limits.
"""
