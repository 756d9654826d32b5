"""The figures quoted in docs/: each renderer runs the simulator or the oracle and writes a table or plot."""
