"""The analytical oracle: workloads, hardware catalogue, time/power equations, calibration."""
