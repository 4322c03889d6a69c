"""Engine launches as evidence: public startup logs as records, replayed through the parsers
and the planner to measure how well the planner predicts what the engine allocated."""
