"""The node: one list of sources of images (containerd namespaces, Docker's containerd, Docker)."""
