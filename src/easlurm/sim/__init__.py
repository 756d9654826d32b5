"""SimPy cluster simulator driving the same policies as the daemon; workloads, traces, metrics, campaigns."""
