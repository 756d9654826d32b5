"""Fakes for hardware that is absent on test machines: NVML, powercap sysfs trees, nvidia-smi."""
