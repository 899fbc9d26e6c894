"""Examples of each command, one source for `pinctl help COMMAND`, the man pages' EXAMPLES and
docs/cli.md. Each is a command line an operator can paste, with what it does. The names are the
sandbox's (scripts/sandbox), so each works there as written; fleet status's need a cluster."""

from __future__ import annotations

# The command's path after "pinctl" -> (what it does, the command line).
EXAMPLES: dict[str, list[tuple[str, str]]] = {
    "ls": [
        ("Every image, whether it is pinned and why", "pinctl ls"),
        ("Only what the GC may delete", "pinctl ls --unpinned"),
        ("Where labels and the policy disagree", "pinctl ls --drift"),
        ("Names only, for a script", "pinctl ls -q --pinned"),
    ],
    "pin": [
        ("Pin one image by name", "pinctl pin example.test/epsilon:3.1"),
        ("Pin every image a pattern matches, showing the plan first", "pinctl pin --dry-run 'example.test/*'"),
    ],
    "unpin": [
        ("Unpin one image", "pinctl unpin example.test/epsilon:3.1"),
    ],
    "sync": [
        ("Show what the policy would change", "pinctl sync --dry-run"),
        ("Pin what the policy names", "pinctl sync"),
        ("Also take back pins no pattern covers", "pinctl sync --prune"),
        ("Keep the pins as images come and go", "pinctl sync --watch"),
        ("As the node-status component runs it: also write the Node's condition",
         "pinctl sync --watch --node-status worker-1"),
    ],
    "check": [
        ("What the CRI tells the kubelet, against what pinctl wants", "pinctl check"),
        ("One image", "pinctl check example.test/epsilon:3.1"),
    ],
    "history": [
        ("Which images went from the node, who deleted them and why, newest first", "pinctl history"),
        ("Why one image went", "pinctl history example.test/epsilon:3.1"),
        ("Only images pinctl wanted kept, in the last day", "pinctl history --wanted --since 1d"),
        ("Also the RemoveImage requests cri-proxy refused or passed on, and restores", "pinctl history --all"),
    ],
    "fleet status": [
        ("Has every node applied the policy ConfigMap? A row per node", "pinctl fleet status"),
        ("In CI after kubectl apply: wait until every node has", "pinctl fleet status --wait 10m"),
        ("The nodes not applied, by name", "pinctl fleet status -q"),
        ("Only the CRI-O nodes, with counts and revisions", "pinctl fleet status -l pinctl.io/runtime=cri-o -o wide"),
    ],
    "gc plan": [
        ("What the kubelet's GC deletes next, and in which order", "pinctl gc plan"),
        ("The same if the disk were 90% full", "pinctl gc plan --usage 90"),
    ],
    "prune": [
        ("Show what would go", "pinctl prune --dry-run"),
        ("Delete every image nothing protects, in a script", "pinctl prune --all-unused --yes"),
        ("Delete one image, unless something protects it", "pinctl prune example.test/epsilon:3.1"),
    ],
    "pull": [
        ("Pull an image and pin it", "pinctl pull --pin example.test/epsilon:3.1"),
    ],
    "import": [
        ("Import an archive into k8s.io and pin its images", "pinctl import --pin images.tar"),
    ],
    "config show": [
        ("Every setting, its value and where it came from", "pinctl config show"),
    ],
    "config lint": [
        ("Problems in the policy, without asking the runtime", "pinctl config lint --offline"),
    ],
    "config export": [
        ("The policy as a CRI-O drop-in", "pinctl config export --for crio"),
        ("The policy as containerd 2.x's pinned_images", "pinctl config export --for containerd"),
    ],
    "cri-proxy": [
        ("Serve the CRI with pinctl's pins in front of containerd",
         "pinctl cri-proxy --listen /run/pinctl/cri.sock -r unix:///run/containerd/containerd.sock"),
    ],
    "completion": [
        ("Completion for the running bash", "source <(pinctl completion bash)"),
    ],
    "help": [
        ("The help of a subcommand", "pinctl help config export"),
    ],
}


def examples_text(path: str) -> str:
    """The examples of a command as help shows them; "" when it has none."""
    found = EXAMPLES.get(path, [])
    if not found:
        return ""
    return "Examples:\n" + "".join(f"  # {what}\n  {line}\n" for what, line in found)
