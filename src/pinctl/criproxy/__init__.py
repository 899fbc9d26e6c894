"""pinctl cri-proxy: the CRI served to the kubelet with pinned: true added for what pinctl pins
(mirrors cri-relay/, the compiled data path)."""
