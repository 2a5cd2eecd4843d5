"""Runs inside Harbor's own process: imports only the standard library and Harbor (staged
into Harbor's environment as ``rsiframe_inharbor``, never imported by rsiframe itself).
"""
