"""Comparing methods: compare (text, png, html) with its statistics, ablation grids, replay
from a run's ledger, and the fidelity check.
"""
