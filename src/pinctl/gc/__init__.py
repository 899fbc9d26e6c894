"""The kubelet's image garbage collector: its settings (kubelet), a pure model of it (model,
estimate), and gc plan and prune on a node (plan)."""
