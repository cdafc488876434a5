"""Evaluation: pure metric functions and evaluators that return dicts."""
