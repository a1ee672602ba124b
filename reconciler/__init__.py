"""unet: declarative GitOps reconciler for multi-tenant cloud networking."""
