"""Energy measurement: sensors, sampler threads, integration, run directories, the node agent."""
