"""unet: a declarative GitOps reconciler for multi-tenant cloud networking.

What unet installs lives in this one namespace: `unet.reconciler` (the pipeline: load, check,
plan, apply, the daemon and the command line), `unet.managers` (the backends unet ships and the
plugin SDK, `unet.managers.sdk`). In the repository the two are its top-level folders, which
this package links to.
"""
