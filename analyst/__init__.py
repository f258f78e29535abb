"""The analyst actor: coordinates a job, reconstructs the released DP sketch from the servers'
result shares and fits models on it (estimators, baselines, metrics)."""
