"""Harvest jobs: records of runs, their counters and every per-record error."""
