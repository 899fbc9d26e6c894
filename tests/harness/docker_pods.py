"""A harness dockerd that can run pods: the containers of cri-dockerd's sandboxes and pods.

Shared by the periodic GC run's seed scenario (tests/integration/gc_seed_scenario.py) and the
fleet's cri-dockerd node (tests/harness/cluster_docker_node.py).
"""

from __future__ import annotations

import json
import shutil

from tests.harness import pods
from tests.harness.docker import DockerDaemon

# Docker's runtime here: this host's runc, with the OCI spec's process.oomScoreAdj dropped first.
# cri-dockerd gives every sandbox -998, and root here lacks CAP_SYS_RESOURCE to lower a score
# ("can't get final child's PID from pipe"); the containerd harness says restrict_oom_score_adj.
RUNC_WRAPPER = """#!/bin/sh
bundle=. prev=
for arg in "$@"; do
  case "$prev" in --bundle|-b) bundle=$arg;; esac
  case "$arg" in --bundle=*) bundle=${arg#--bundle=};; esac
  prev=$arg
done
case " $* " in *" create "*)
  python3 -c 'import json, sys
path = sys.argv[1]
spec = json.load(open(path))
if spec.get("process", {}).pop("oomScoreAdj", None) is not None:
    json.dump(spec, open(path, "w"))' "$bundle/config.json";;
esac
exec RUNC "$@"
"""


class HostRuncDocker(DockerDaemon):
    """The harness dockerd, its containers run by this host's runc (the docker-26 engine's own,
    from trixie, needs a newer glibc than this machine may have), through :data:`RUNC_WRAPPER`."""

    def stop(self) -> None:
        """Containers removed first; then whatever dockerd left mounted below its paths (the
        host network's ``netns/default`` bind mount once a host-network container ran)."""
        if self.is_alive():
            ids = self.docker("ps", "-aq", check=False).stdout.split()
            if ids:
                self.docker("rm", "--force", *ids, check=False)
        exec_root = self.exec_root
        super().stop()
        for root in (self.base_dir, exec_root):
            for point in sorted(pods._mounts_below(root), key=len, reverse=True):
                pods._unmount(point)
        if self.base_dir not in exec_root.parents:
            shutil.rmtree(exec_root, ignore_errors=True)  # a short /tmp dir its stop could not remove

    def render_config(self) -> str:
        wrapper = self.base_dir / "host-runc"
        wrapper.write_text(RUNC_WRAPPER.replace("RUNC", str(pods.runc_binary())))
        wrapper.chmod(0o755)
        config = json.loads(super().render_config())
        config.update({"runtimes": {"host-runc": {"path": str(wrapper)}}, "default-runtime": "host-runc"})
        return json.dumps(config, indent=2) + "\n"
