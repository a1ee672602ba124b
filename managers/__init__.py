"""Manager plugins: the backends unet drives. Built in: `ovn` (fabric), `kubernetes` (k8s)."""
