"""unet: declarative GitOps reconciler for multi-tenant cloud networking."""

__version__ = "0.1.0"
