"""What the long-running services (sync --watch in pinctl.watch, cri-proxy in pinctl.criproxy)
share, below both: noticing a changed config (configfiles), handing memory back (memory), and
the words of their health and info metrics (monitoring). Neither service imports the other."""
