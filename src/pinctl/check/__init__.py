"""pinctl check: what the CRI runtime tells the kubelet, set against what pinctl wants kept."""
