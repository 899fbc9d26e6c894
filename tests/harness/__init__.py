"""Real-engine test harness for pinctl.

- ``debs``: container engines unpacked from Debian packages into a user cache.
- ``containerd``: private containerd daemons (own root, state, sockets, config).
- ``images``: small deterministic OCI/docker image archives built in pure Python.
- ``cri``: a dependency-free CRI ``ListImages`` client (what the kubelet sees).
- ``sandbox``: a detached daemon with sample images for trying pinctl by hand.
"""
