"""Fitting the oracle to measurements: the measurement format, calibration, cross-validation, baselines and the
co-location pair fit. Imports the oracle, never the measuring code."""
