"""Attention layers: the functions and modules every chapter builds (chapters 1-4, 6 and 9).

The bottom of the package: these modules import only `mha._validation` and `mha.diagrams` and
each other, never a task, model, analysis or figure (tests/test_layout.py holds the rule).
"""
