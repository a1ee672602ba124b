"""`python -m unet`, as the `unet` script."""

from unet.reconciler.cli import entry

entry()
