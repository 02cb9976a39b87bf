"""The run's guards, consulted by the loop at each step boundary: its signals (run_signals.py: SIGTERM/SIGINT stop
the run with a checkpoint, SIGUSR1/SIGUSR2 become elastic requests) and the stop after a run of steps whose
optimizer steps were skipped for non-finite values (nonfinite.py)."""
