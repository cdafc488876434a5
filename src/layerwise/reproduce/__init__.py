"""Reproduce the two papers' experiments as resumable grids of keyed runs (see docs/reproduce.md).

plan.py (run specs, keys, status, time estimate), runner.py (skip / resume / record failures), tables.py
(mean/std, paired test, Markdown), pooling.py (the LayerAttPooler ablation), attendout.py (the dropout study).
"""
