"""The reconcile daemon (`unet reconcile`): loop.py runs, history.py records them,
report.py tells of them, metrics.py serves them, cli.py parses the command line."""
