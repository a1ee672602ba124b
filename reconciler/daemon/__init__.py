"""The reconcile daemon (`unet reconcile`): loop.py runs, history.py records them,
report.py tells of them, metrics.py counts them and endpoints.py serves them (in a
process of its own), cli.py parses the command line."""
