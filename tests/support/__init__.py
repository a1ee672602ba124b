"""What the tests share: real OVN labs, running unet, a proxy for faults, the GitOps
workflow runner, and the CRD and CEL validator of the Kubernetes objects unet renders."""
