"""Who deleted an image, as far as the node can tell: a deletion joined to the RemoveImage
calls cri-proxy saw before it. Pure: the caller reads the journal and the proxy's mark.

The rules (docs/history.md, "The rules, exactly", says them to operators):

- a RemoveImage that cri-proxy forwarded and the runtime answered OK, naming the image's ID
  (or a prefix of it) or one of its references, at most JOIN_BEFORE_S before the first
  reference went (or up to JOIN_AFTER_S after: the proxy writes its entry once the runtime has
  answered, which can be after the watcher saw the reference go): ``kubelet`` when the caller
  was the kubelet, else ``cri-client`` with the caller's name;
- no such request while a proxy serves: ``outside-cri`` (ctr, nerdctl, docker rmi, or a CRI
  client talking to the runtime's own socket rather than the proxy's);
- no proxy serving: ``kubelet-log`` when the kubelet's own log named the image ID, else
  ``unknown``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from pinctl import refs as refnames
from pinctl.errors import UsageError
from pinctl.journal import (DELETER_CRI_CLIENT, DELETER_KUBELET, DELETER_KUBELET_LOG, DELETER_OUTSIDE_CRI,
                            DELETER_UNKNOWN, REQUEST_FORWARDED, RemoveRequest)

# The kubelet's GC calls RemoveImage image after image, and containerd deletes the references
# within the call: a minute covers a slow runtime and a busy node without joining a request made
# for an image that was pulled again since (that takes a pull, rarely under a minute of which).
JOIN_BEFORE_S = 60.0
JOIN_AFTER_S = 10.0
KUBELET_NAMES = ("kubelet",)


@dataclass(frozen=True)
class Verdict:
    deleter: str
    client: str
    evidence: str


def _normalized(ref: str) -> str:
    try:
        return refnames.normalize(ref)
    except UsageError:  # a name that does not parse is compared as written
        return ref


def names_image(request: RemoveRequest, image_id: str, refs: Sequence[str]) -> bool:
    """Whether a RemoveImage names this image: its ID (whole, bare or a prefix of 12 digits or
    more, as crictl takes), or one of its references (as written, or normalised)."""
    asked = request.ref.strip()
    hexes = image_id.split(":", 1)[-1] if image_id else ""
    for said in (request.image_id, asked):
        if not said or not hexes:
            continue
        bare = said.split(":", 1)[-1] if said.startswith("sha256:") else said
        if bare == hexes or (len(bare) >= 12 and hexes.startswith(bare) and all(c in "0123456789abcdef" for c in bare)):
            return True
    if not asked:
        return False
    if asked in refs:
        return True
    wanted = _normalized(asked)
    return any(_normalized(ref) == wanted for ref in refs)


def joined_request(requests: Iterable[RemoveRequest], image_id: str, refs: Sequence[str],
                   first_seen: float, last_seen: float) -> Optional[RemoveRequest]:
    """The latest forwarded RemoveImage naming the image within the window around its going."""
    found: Optional[RemoveRequest] = None
    for request in requests:
        if request.outcome != REQUEST_FORWARDED:
            continue
        if not first_seen - JOIN_BEFORE_S <= request.time <= last_seen + JOIN_AFTER_S:
            continue
        if names_image(request, image_id, refs) and (found is None or request.time > found.time):
            found = request
    return found


def attribute(image_id: str, refs: Sequence[str], first_seen: float, last_seen: float,
              requests: Iterable[RemoveRequest], proxy_pid: Optional[int],
              kubelet_log: Optional[str] = None, kubelet_log_path: str = "") -> Verdict:
    """The deleter of the references that went between first_seen and last_seen.

    proxy_pid: the cri-proxy serving now (pinctl.journal.presence), None when none does.
    kubelet_log: the kubelet's log line naming the image ID, when one was found.
    """
    request = joined_request(requests, image_id, refs, first_seen, last_seen)
    if request is not None:
        caller = request.client or "an unnamed process"
        pid = f" (pid {request.pid})" if request.pid else ""
        said = request.image_id or request.ref
        lag = first_seen - request.time
        when = f"{lag:.1f} s before the image went" if lag >= 0 else "as the image went"
        if request.client in KUBELET_NAMES:
            return Verdict(DELETER_KUBELET, request.client,
                           f"cri-proxy saw the kubelet{pid} call RemoveImage for {said} {when}.")
        return Verdict(DELETER_CRI_CLIENT, request.client,
                       f"cri-proxy saw {caller}{pid} call RemoveImage for {said} {when}.")
    if proxy_pid is not None:
        return Verdict(DELETER_OUTSIDE_CRI, "",
                       f"cri-proxy (pid {proxy_pid}) was serving and saw no RemoveImage for it: deleted not through "
                       "the CRI (ctr, nerdctl, docker rmi), or by a CRI client on the runtime's own socket.")
    if kubelet_log:
        where = f" ({kubelet_log_path})" if kubelet_log_path else ""
        return Verdict(DELETER_KUBELET_LOG, "kubelet",
                       f"the kubelet's log{where} says it removed {image_id} to free bytes.")
    return Verdict(DELETER_UNKNOWN, "",
                   "no cri-proxy was serving and nothing else on the node names the deleter: "
                   "run cri-proxy to tell the kubelet from other deleters.")
