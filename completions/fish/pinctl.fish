# fish completion for pinctl. Generated from pinctl 0.1.0's command tree by tools/generate.py; do not edit.
# Install: $(PREFIX)/share/fish/vendor_completions.d/pinctl.fish, or: pinctl completion fish | source
# Completing commands, options and choices runs no program; image references and
# namespaces are asked of pinctl.

# Run pinctl with the engine options typed on the line (for refs the namespaces too); errors go
# to /dev/null, since completion must stay quiet when there is no daemon.
function __fish_pinctl_ask --argument-names kind
    set -e argv[1]
    # An option is being typed, not a value: starting pinctl would only slow the prompt.
    string match -q -- '-*' (commandline -ct); and return 0
    set -l words (commandline -opc)
    set -l prog pinctl
    if string match -q -- '*/*' $words[1]; and test -x $words[1]
        set prog $words[1]
    end
    set -l pass
    set -l i 2
    while test $i -le (count $words)
        set -l word $words[$i]
        set -l next $words[(math $i + 1)]
        switch $word
            case -a --address
                set -a pass "--address=$next"
                set i (math $i + 1)
            case '--address=*'
                set -a pass $word
            case '-a?*'
                set -a pass "--address="(string sub -s 3 -- $word)
            case --config
                set -a pass "--config=$next"
                set i (math $i + 1)
            case '--config=*'
                set -a pass $word
            case --docker-host
                set -a pass "--docker-host=$next"
                set i (math $i + 1)
            case '--docker-host=*'
                set -a pass $word
            case --history-dir
                set -a pass "--history-dir=$next"
                set i (math $i + 1)
            case '--history-dir=*'
                set -a pass $word
            case --timeout
                set -a pass "--timeout=$next"
                set i (math $i + 1)
            case '--timeout=*'
                set -a pass $word
            case -n --namespace
                test $kind = refs; and set -a pass "--namespace=$next"
                set i (math $i + 1)
            case '--namespace=*'
                test $kind = refs; and set -a pass $word
            case '-n?*'
                test $kind = refs; and set -a pass "--namespace="(string sub -s 3 -- $word)
        end
        set i (math $i + 1)
    end
    command -q $prog; or return 0
    command $prog $argv $pass 2>/dev/null </dev/null
end

function __fish_pinctl_refs --description 'Image references pinctl ls -q lists'
    __fish_pinctl_ask refs ls -q
end

function __fish_pinctl_pinned_refs --description 'Pinned image references pinctl ls -q --pinned lists'
    __fish_pinctl_ask refs ls -q --pinned
end

function __fish_pinctl_deleted_refs --description 'Image references pinctl history -q --all lists'
    __fish_pinctl_ask refs history -q --all
end

function __fish_pinctl_namespaces --description 'containerd namespaces pinctl namespaces -q lists'
    __fish_pinctl_ask namespaces namespaces -q
end

# Sourcing twice must not double every line.
complete -c pinctl -e
# Arguments are commands and image references, never file names (values may be).
complete -c pinctl -f

# pinctl
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -a check -d 'Compare what pinctl expects with what the CRI runtime tells the kubelet'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -a completion -d 'Print the completion script for SHELL'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -a config -d 'Show and check pinctl\'s configuration and pin policy'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -a cri-proxy -d 'Serve the CRI to the kubelet, forwarding every call to the runtime (--runtime-endpoint)'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -a fleet -d 'What the pinctl agents of a Kubernetes cluster report on their Nodes'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -a gc -d 'What the kubelet\'s image garbage collector will do on this node'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -a help -d 'Show the help of COMMAND (pinctl pin --help) with examples of it, or pinctl\'s own'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -a history -d 'Show the node\'s image deletions, newest first: when, the image, why pinctl wanted it,...'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -a import -d 'Import image archives (docker save, OCI layout; tar, gzip or zstd) through the runtime'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -a ls -d 'List image references, whether each is pinned and why'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -a namespaces -d 'List containerd\'s namespaces; those pinctl reads by default are marked'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -a options -d 'List the options every command takes (as kubectl options does)'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -a pin -d 'Pin images: add io.cri-containerd.pinned=pinned'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -a prune -d 'Delete unused images as the kubelet\'s GC would, never one that must stay'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -a pull -d 'Pull images through the runtime that will use them, within a disk budget'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -a sync -d 'Label every image the policy covers, once'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -a unpin -d 'Unpin images: remove io.cri-containerd.pinned'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -l version -d 'Show the version and exit'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -s h -l help -d 'Show this message and exit'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -s n -l namespace -x -a '(__fish_pinctl_namespaces)' -d 'containerd namespace, repeatable; \'all\' for every one'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -s a -l address -r -F -d 'containerd socket'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -l timeout -x -d 'Seconds to wait for each answer from the engine (0.05 to 86400)'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -l containerd-config -r -F -d 'containerd config to read the CRI sandbox image and (containerd 2.x) pinned_images from'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -l crio-config -r -F -d 'CRI-O config to read pinned_images and pause_image from (its drop-ins: PATH.d)'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -l kubelet-root-dir -r -F -d 'The kubelet\'s --root-dir: check reads its image pull records there'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -l docker-host -x -d 'Docker daemon, as in DOCKER_HOST'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -s r -l runtime-endpoint -x -d 'CRI runtime socket (ls --cri, check)'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -l pinned-image -x -d 'Add a pinned-image pattern (exact, glob \'repo/*\' or keyword \'*word*\'); repeatable'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -l pattern-dialect -x -a 'pinctl crio' -d 'How patterns match: pinctl (strict) or crio (exactly as CRI-O)'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -l import-dir -r -F -d 'A directory of image archives for sync to import and pin (repeatable)'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -l history-dir -r -F -d 'Directory of the deletion journal (sync --watch, cri-proxy, history)'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -l kubelet-log -r -F -d 'The kubelet\'s log file, read to tell its image GC\'s deletions (sync --watch)'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -l metrics-address -x -d 'Serve Prometheus metrics (/metrics), /healthz and /readyz on HOST:PORT; an empty HOST...'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -l config -r -F -d 'pinctl config file; drop-ins come from config.d beside it'
complete -c pinctl -n 'not __fish_seen_subcommand_from check completion config cri-proxy fleet gc help history import ls namespaces options pin prune pull sync unpin' -l from-crio -r -F -d 'Add CRI-O\'s pinned_images (crio dialect) from PATH and PATH.d/'

# pinctl check
complete -c pinctl -n '__fish_seen_subcommand_from check' -l wait -x -d 'Poll until they agree, for at most SECONDS: a runtime may lag a label change'
complete -c pinctl -n '__fish_seen_subcommand_from check' -l kubelet-config -r -F -d 'The kubelet\'s config file, for its credential checks'
complete -c pinctl -n '__fish_seen_subcommand_from check' -l textfile -r -F -d 'Also write the images per namespace and pin state, policy coverage and drift, and the...'
complete -c pinctl -n '__fish_seen_subcommand_from check' -s o -l output -x -a 'table wide json' -d 'Output format; table shows only disagreements'
complete -c pinctl -n '__fish_seen_subcommand_from check' -s h -l help -d 'Show this message and exit'
complete -c pinctl -n '__fish_seen_subcommand_from check' -s n -l namespace -x -a '(__fish_pinctl_namespaces)' -d 'containerd namespace, repeatable; \'all\' for every one'
complete -c pinctl -n '__fish_seen_subcommand_from check' -s a -l address -r -F -d 'containerd socket'
complete -c pinctl -n '__fish_seen_subcommand_from check' -l timeout -x -d 'Seconds to wait for each answer from the engine (0.05 to 86400)'
complete -c pinctl -n '__fish_seen_subcommand_from check' -l containerd-config -r -F -d 'containerd config to read the CRI sandbox image and (containerd 2.x) pinned_images from'
complete -c pinctl -n '__fish_seen_subcommand_from check' -l crio-config -r -F -d 'CRI-O config to read pinned_images and pause_image from (its drop-ins: PATH.d)'
complete -c pinctl -n '__fish_seen_subcommand_from check' -l kubelet-root-dir -r -F -d 'The kubelet\'s --root-dir: check reads its image pull records there'
complete -c pinctl -n '__fish_seen_subcommand_from check' -l docker-host -x -d 'Docker daemon, as in DOCKER_HOST'
complete -c pinctl -n '__fish_seen_subcommand_from check' -s r -l runtime-endpoint -x -d 'CRI runtime socket (ls --cri, check)'
complete -c pinctl -n '__fish_seen_subcommand_from check' -l pinned-image -x -d 'Add a pinned-image pattern (exact, glob \'repo/*\' or keyword \'*word*\'); repeatable'
complete -c pinctl -n '__fish_seen_subcommand_from check' -l pattern-dialect -x -a 'pinctl crio' -d 'How patterns match: pinctl (strict) or crio (exactly as CRI-O)'
complete -c pinctl -n '__fish_seen_subcommand_from check' -l import-dir -r -F -d 'A directory of image archives for sync to import and pin (repeatable)'
complete -c pinctl -n '__fish_seen_subcommand_from check' -l history-dir -r -F -d 'Directory of the deletion journal (sync --watch, cri-proxy, history)'
complete -c pinctl -n '__fish_seen_subcommand_from check' -l kubelet-log -r -F -d 'The kubelet\'s log file, read to tell its image GC\'s deletions (sync --watch)'
complete -c pinctl -n '__fish_seen_subcommand_from check' -l metrics-address -x -d 'Serve Prometheus metrics (/metrics), /healthz and /readyz on HOST:PORT; an empty HOST...'
complete -c pinctl -n '__fish_seen_subcommand_from check' -l config -r -F -d 'pinctl config file; drop-ins come from config.d beside it'
complete -c pinctl -n '__fish_seen_subcommand_from check' -l from-crio -r -F -d 'Add CRI-O\'s pinned_images (crio dialect) from PATH and PATH.d/'
complete -c pinctl -n '__fish_seen_subcommand_from check' -a '(__fish_pinctl_refs)'

# pinctl completion
complete -c pinctl -n '__fish_seen_subcommand_from completion' -s h -l help -d 'Show this message and exit'
complete -c pinctl -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'

# pinctl config
complete -c pinctl -n '__fish_seen_subcommand_from config; and not __fish_seen_subcommand_from export lint show' -a export -d 'Write the pin policy as a runtime\'s own configuration, on stdout'
complete -c pinctl -n '__fish_seen_subcommand_from config; and not __fish_seen_subcommand_from export lint show' -a lint -d 'Check the pin policy: one line per problem'
complete -c pinctl -n '__fish_seen_subcommand_from config; and not __fish_seen_subcommand_from export lint show' -a show -d 'Show the effective configuration and where each value came from'
complete -c pinctl -n '__fish_seen_subcommand_from config; and not __fish_seen_subcommand_from export lint show' -s h -l help -d 'Show this message and exit'

# pinctl config export
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from export' -l for -x -a 'crio containerd cri-dockerd' -d 'The runtime whose configuration to write'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from export' -l offline -d 'Do not ask the engines; patterns a runtime cannot express are then left out (an...'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from export' -s h -l help -d 'Show this message and exit'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from export' -s n -l namespace -x -a '(__fish_pinctl_namespaces)' -d 'containerd namespace, repeatable; \'all\' for every one'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from export' -s a -l address -r -F -d 'containerd socket'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from export' -l timeout -x -d 'Seconds to wait for each answer from the engine (0.05 to 86400)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from export' -l containerd-config -r -F -d 'containerd config to read the CRI sandbox image and (containerd 2.x) pinned_images from'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from export' -l crio-config -r -F -d 'CRI-O config to read pinned_images and pause_image from (its drop-ins: PATH.d)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from export' -l kubelet-root-dir -r -F -d 'The kubelet\'s --root-dir: check reads its image pull records there'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from export' -l docker-host -x -d 'Docker daemon, as in DOCKER_HOST'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from export' -s r -l runtime-endpoint -x -d 'CRI runtime socket (ls --cri, check)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from export' -l pinned-image -x -d 'Add a pinned-image pattern (exact, glob \'repo/*\' or keyword \'*word*\'); repeatable'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from export' -l pattern-dialect -x -a 'pinctl crio' -d 'How patterns match: pinctl (strict) or crio (exactly as CRI-O)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from export' -l import-dir -r -F -d 'A directory of image archives for sync to import and pin (repeatable)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from export' -l history-dir -r -F -d 'Directory of the deletion journal (sync --watch, cri-proxy, history)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from export' -l kubelet-log -r -F -d 'The kubelet\'s log file, read to tell its image GC\'s deletions (sync --watch)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from export' -l metrics-address -x -d 'Serve Prometheus metrics (/metrics), /healthz and /readyz on HOST:PORT; an empty HOST...'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from export' -l config -r -F -d 'pinctl config file; drop-ins come from config.d beside it'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from export' -l from-crio -r -F -d 'Add CRI-O\'s pinned_images (crio dialect) from PATH and PATH.d/'

# pinctl config lint
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from lint' -l offline -d 'Only check the patterns themselves; do not ask containerd'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from lint' -s o -l output -x -a 'table json' -d 'Output format'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from lint' -s h -l help -d 'Show this message and exit'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from lint' -s n -l namespace -x -a '(__fish_pinctl_namespaces)' -d 'containerd namespace, repeatable; \'all\' for every one'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from lint' -s a -l address -r -F -d 'containerd socket'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from lint' -l timeout -x -d 'Seconds to wait for each answer from the engine (0.05 to 86400)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from lint' -l containerd-config -r -F -d 'containerd config to read the CRI sandbox image and (containerd 2.x) pinned_images from'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from lint' -l crio-config -r -F -d 'CRI-O config to read pinned_images and pause_image from (its drop-ins: PATH.d)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from lint' -l kubelet-root-dir -r -F -d 'The kubelet\'s --root-dir: check reads its image pull records there'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from lint' -l docker-host -x -d 'Docker daemon, as in DOCKER_HOST'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from lint' -s r -l runtime-endpoint -x -d 'CRI runtime socket (ls --cri, check)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from lint' -l pinned-image -x -d 'Add a pinned-image pattern (exact, glob \'repo/*\' or keyword \'*word*\'); repeatable'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from lint' -l pattern-dialect -x -a 'pinctl crio' -d 'How patterns match: pinctl (strict) or crio (exactly as CRI-O)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from lint' -l import-dir -r -F -d 'A directory of image archives for sync to import and pin (repeatable)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from lint' -l history-dir -r -F -d 'Directory of the deletion journal (sync --watch, cri-proxy, history)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from lint' -l kubelet-log -r -F -d 'The kubelet\'s log file, read to tell its image GC\'s deletions (sync --watch)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from lint' -l metrics-address -x -d 'Serve Prometheus metrics (/metrics), /healthz and /readyz on HOST:PORT; an empty HOST...'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from lint' -l config -r -F -d 'pinctl config file; drop-ins come from config.d beside it'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from lint' -l from-crio -r -F -d 'Add CRI-O\'s pinned_images (crio dialect) from PATH and PATH.d/'

# pinctl config show
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from show' -s o -l output -x -a 'table json' -d 'Output format'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from show' -s h -l help -d 'Show this message and exit'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from show' -s n -l namespace -x -a '(__fish_pinctl_namespaces)' -d 'containerd namespace, repeatable; \'all\' for every one'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from show' -s a -l address -r -F -d 'containerd socket'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from show' -l timeout -x -d 'Seconds to wait for each answer from the engine (0.05 to 86400)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from show' -l containerd-config -r -F -d 'containerd config to read the CRI sandbox image and (containerd 2.x) pinned_images from'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from show' -l crio-config -r -F -d 'CRI-O config to read pinned_images and pause_image from (its drop-ins: PATH.d)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from show' -l kubelet-root-dir -r -F -d 'The kubelet\'s --root-dir: check reads its image pull records there'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from show' -l docker-host -x -d 'Docker daemon, as in DOCKER_HOST'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from show' -s r -l runtime-endpoint -x -d 'CRI runtime socket (ls --cri, check)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from show' -l pinned-image -x -d 'Add a pinned-image pattern (exact, glob \'repo/*\' or keyword \'*word*\'); repeatable'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from show' -l pattern-dialect -x -a 'pinctl crio' -d 'How patterns match: pinctl (strict) or crio (exactly as CRI-O)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from show' -l import-dir -r -F -d 'A directory of image archives for sync to import and pin (repeatable)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from show' -l history-dir -r -F -d 'Directory of the deletion journal (sync --watch, cri-proxy, history)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from show' -l kubelet-log -r -F -d 'The kubelet\'s log file, read to tell its image GC\'s deletions (sync --watch)'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from show' -l metrics-address -x -d 'Serve Prometheus metrics (/metrics), /healthz and /readyz on HOST:PORT; an empty HOST...'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from show' -l config -r -F -d 'pinctl config file; drop-ins come from config.d beside it'
complete -c pinctl -n '__fish_seen_subcommand_from config; and __fish_seen_subcommand_from show' -l from-crio -r -F -d 'Add CRI-O\'s pinned_images (crio dialect) from PATH and PATH.d/'

# pinctl cri-proxy
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l listen -r -F -d 'Serve the CRI on this unix socket (mode 0660), e.g'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l relay -x -d 'What forwards the calls: pinctl-cri-relay, the compiled relay (auto: when installed,...'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l refresh -x -d 'Read the pins this often where no image events come (CRI-O, --no-events)'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l resync -x -d 'Read the pins this often even when events come'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l events -l no-events -d 'Read the pins after the runtime\'s image events'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l allow-remove-pinned -d 'Forward RemoveImage of a pinned image too, not FAILED_PRECONDITION'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l log-format -x -a 'text json' -d 'One log line per event on stderr, as text or JSON'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -s h -l help -d 'Show this message and exit'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -s n -l namespace -x -a '(__fish_pinctl_namespaces)' -d 'containerd namespace, repeatable; \'all\' for every one'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -s a -l address -r -F -d 'containerd socket'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l timeout -x -d 'Seconds to wait for each answer from the engine (0.05 to 86400)'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l containerd-config -r -F -d 'containerd config to read the CRI sandbox image and (containerd 2.x) pinned_images from'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l crio-config -r -F -d 'CRI-O config to read pinned_images and pause_image from (its drop-ins: PATH.d)'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l kubelet-root-dir -r -F -d 'The kubelet\'s --root-dir: check reads its image pull records there'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l docker-host -x -d 'Docker daemon, as in DOCKER_HOST'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -s r -l runtime-endpoint -x -d 'CRI runtime socket (ls --cri, check)'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l pinned-image -x -d 'Add a pinned-image pattern (exact, glob \'repo/*\' or keyword \'*word*\'); repeatable'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l pattern-dialect -x -a 'pinctl crio' -d 'How patterns match: pinctl (strict) or crio (exactly as CRI-O)'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l import-dir -r -F -d 'A directory of image archives for sync to import and pin (repeatable)'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l history-dir -r -F -d 'Directory of the deletion journal (sync --watch, cri-proxy, history)'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l kubelet-log -r -F -d 'The kubelet\'s log file, read to tell its image GC\'s deletions (sync --watch)'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l metrics-address -x -d 'Serve Prometheus metrics (/metrics), /healthz and /readyz on HOST:PORT; an empty HOST...'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l config -r -F -d 'pinctl config file; drop-ins come from config.d beside it'
complete -c pinctl -n '__fish_seen_subcommand_from cri-proxy' -l from-crio -r -F -d 'Add CRI-O\'s pinned_images (crio dialect) from PATH and PATH.d/'

# pinctl fleet
complete -c pinctl -n '__fish_seen_subcommand_from fleet; and not __fish_seen_subcommand_from status' -a status -d 'A row per node: its agent\'s state against the policy ConfigMap\'s revision (its content...'
complete -c pinctl -n '__fish_seen_subcommand_from fleet; and not __fish_seen_subcommand_from status' -s h -l help -d 'Show this message and exit'

# pinctl fleet status
complete -c pinctl -n '__fish_seen_subcommand_from fleet; and __fish_seen_subcommand_from status' -s l -l selector -x -d 'Only nodes with these labels, as kubectl takes them (zone=a,pinctl.io/runtime!=cri-o)'
complete -c pinctl -n '__fish_seen_subcommand_from fleet; and __fish_seen_subcommand_from status' -l wait -x -d 'Poll until every node applied the ConfigMap, for at most TIME (5m); a status line...'
complete -c pinctl -n '__fish_seen_subcommand_from fleet; and __fish_seen_subcommand_from status' -l stale-after -x -d 'A condition not rewritten for this long means its agent is gone'
complete -c pinctl -n '__fish_seen_subcommand_from fleet; and __fish_seen_subcommand_from status' -l kubeconfig -r -F -d 'As kubectl\'s: default KUBECONFIG, then ~/.kube/config'
complete -c pinctl -n '__fish_seen_subcommand_from fleet; and __fish_seen_subcommand_from status' -l context -x -d 'The kubeconfig context; default: its current one'
complete -c pinctl -n '__fish_seen_subcommand_from fleet; and __fish_seen_subcommand_from status' -l namespace -x -a '(__fish_pinctl_namespaces)' -d 'The policy ConfigMap\'s namespace'
complete -c pinctl -n '__fish_seen_subcommand_from fleet; and __fish_seen_subcommand_from status' -l configmap -x -d 'The policy ConfigMap'
complete -c pinctl -n '__fish_seen_subcommand_from fleet; and __fish_seen_subcommand_from status' -l key -x -d 'The ConfigMap\'s key holding the policy'
complete -c pinctl -n '__fish_seen_subcommand_from fleet; and __fish_seen_subcommand_from status' -s q -l quiet -d 'Print only the names of the nodes not applied'
complete -c pinctl -n '__fish_seen_subcommand_from fleet; and __fish_seen_subcommand_from status' -s o -l output -x -a 'table wide json' -d 'Output format'
complete -c pinctl -n '__fish_seen_subcommand_from fleet; and __fish_seen_subcommand_from status' -s h -l help -d 'Show this message and exit'

# pinctl gc
complete -c pinctl -n '__fish_seen_subcommand_from gc; and not __fish_seen_subcommand_from plan' -a plan -d 'Show what the kubelet\'s image GC would delete next, in order, and what it keeps and why'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and not __fish_seen_subcommand_from plan' -s h -l help -d 'Show this message and exit'

# pinctl gc plan
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l usage -x -d 'Simulate a disk this full instead of reading the image filesystem\'s usage'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l kubelet-config -r -F -d 'The kubelet\'s config file, for its GC settings'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l high-threshold -x -d 'imageGCHighThresholdPercent: usage at which the GC starts (kubelet default 85)'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l low-threshold -x -d 'imageGCLowThresholdPercent: usage the GC frees down to (kubelet default 80)'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l min-age -x -d 'imageMinimumGCAge: younger images are never deleted (kubelet default 2m)'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l max-age -x -d 'imageMaximumGCAge: images unused this long go at any usage (kubelet default 0: off)'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l textfile -r -F -d 'Also write the image filesystem\'s usage against the thresholds and the wanted images...'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -s o -l output -x -a 'table wide json' -d 'Output format'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -s h -l help -d 'Show this message and exit'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -s n -l namespace -x -a '(__fish_pinctl_namespaces)' -d 'containerd namespace, repeatable; \'all\' for every one'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -s a -l address -r -F -d 'containerd socket'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l timeout -x -d 'Seconds to wait for each answer from the engine (0.05 to 86400)'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l containerd-config -r -F -d 'containerd config to read the CRI sandbox image and (containerd 2.x) pinned_images from'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l crio-config -r -F -d 'CRI-O config to read pinned_images and pause_image from (its drop-ins: PATH.d)'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l kubelet-root-dir -r -F -d 'The kubelet\'s --root-dir: check reads its image pull records there'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l docker-host -x -d 'Docker daemon, as in DOCKER_HOST'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -s r -l runtime-endpoint -x -d 'CRI runtime socket (ls --cri, check)'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l pinned-image -x -d 'Add a pinned-image pattern (exact, glob \'repo/*\' or keyword \'*word*\'); repeatable'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l pattern-dialect -x -a 'pinctl crio' -d 'How patterns match: pinctl (strict) or crio (exactly as CRI-O)'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l import-dir -r -F -d 'A directory of image archives for sync to import and pin (repeatable)'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l history-dir -r -F -d 'Directory of the deletion journal (sync --watch, cri-proxy, history)'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l kubelet-log -r -F -d 'The kubelet\'s log file, read to tell its image GC\'s deletions (sync --watch)'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l metrics-address -x -d 'Serve Prometheus metrics (/metrics), /healthz and /readyz on HOST:PORT; an empty HOST...'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l config -r -F -d 'pinctl config file; drop-ins come from config.d beside it'
complete -c pinctl -n '__fish_seen_subcommand_from gc; and __fish_seen_subcommand_from plan' -l from-crio -r -F -d 'Add CRI-O\'s pinned_images (crio dialect) from PATH and PATH.d/'

# pinctl help
complete -c pinctl -n '__fish_seen_subcommand_from help' -s h -l help -d 'Show this message and exit'
complete -c pinctl -n '__fish_seen_subcommand_from help' 

# pinctl history
complete -c pinctl -n '__fish_seen_subcommand_from history' -l since -x -d 'Only entries since TIME: a span back from now (30m, 2h, 7d, 1d12h) or a moment...'
complete -c pinctl -n '__fish_seen_subcommand_from history' -l wanted -d 'Only images pinctl wanted kept (policy, import_dirs, a pin)'
complete -c pinctl -n '__fish_seen_subcommand_from history' -l all -d 'Also the RemoveImage requests cri-proxy saw (refused or passed on) and the restores of...'
complete -c pinctl -n '__fish_seen_subcommand_from history' -s o -l output -x -a 'table wide json' -d 'Output format'
complete -c pinctl -n '__fish_seen_subcommand_from history' -s q -l quiet -d 'Print only references, one per line'
complete -c pinctl -n '__fish_seen_subcommand_from history' -s h -l help -d 'Show this message and exit'
complete -c pinctl -n '__fish_seen_subcommand_from history' -s n -l namespace -x -a '(__fish_pinctl_namespaces)' -d 'containerd namespace, repeatable; \'all\' for every one'
complete -c pinctl -n '__fish_seen_subcommand_from history' -s a -l address -r -F -d 'containerd socket'
complete -c pinctl -n '__fish_seen_subcommand_from history' -l timeout -x -d 'Seconds to wait for each answer from the engine (0.05 to 86400)'
complete -c pinctl -n '__fish_seen_subcommand_from history' -l containerd-config -r -F -d 'containerd config to read the CRI sandbox image and (containerd 2.x) pinned_images from'
complete -c pinctl -n '__fish_seen_subcommand_from history' -l crio-config -r -F -d 'CRI-O config to read pinned_images and pause_image from (its drop-ins: PATH.d)'
complete -c pinctl -n '__fish_seen_subcommand_from history' -l kubelet-root-dir -r -F -d 'The kubelet\'s --root-dir: check reads its image pull records there'
complete -c pinctl -n '__fish_seen_subcommand_from history' -l docker-host -x -d 'Docker daemon, as in DOCKER_HOST'
complete -c pinctl -n '__fish_seen_subcommand_from history' -s r -l runtime-endpoint -x -d 'CRI runtime socket (ls --cri, check)'
complete -c pinctl -n '__fish_seen_subcommand_from history' -l pinned-image -x -d 'Add a pinned-image pattern (exact, glob \'repo/*\' or keyword \'*word*\'); repeatable'
complete -c pinctl -n '__fish_seen_subcommand_from history' -l pattern-dialect -x -a 'pinctl crio' -d 'How patterns match: pinctl (strict) or crio (exactly as CRI-O)'
complete -c pinctl -n '__fish_seen_subcommand_from history' -l import-dir -r -F -d 'A directory of image archives for sync to import and pin (repeatable)'
complete -c pinctl -n '__fish_seen_subcommand_from history' -l history-dir -r -F -d 'Directory of the deletion journal (sync --watch, cri-proxy, history)'
complete -c pinctl -n '__fish_seen_subcommand_from history' -l kubelet-log -r -F -d 'The kubelet\'s log file, read to tell its image GC\'s deletions (sync --watch)'
complete -c pinctl -n '__fish_seen_subcommand_from history' -l metrics-address -x -d 'Serve Prometheus metrics (/metrics), /healthz and /readyz on HOST:PORT; an empty HOST...'
complete -c pinctl -n '__fish_seen_subcommand_from history' -l config -r -F -d 'pinctl config file; drop-ins come from config.d beside it'
complete -c pinctl -n '__fish_seen_subcommand_from history' -l from-crio -r -F -d 'Add CRI-O\'s pinned_images (crio dialect) from PATH and PATH.d/'
complete -c pinctl -n '__fish_seen_subcommand_from history' -a '(__fish_pinctl_deleted_refs)'

# pinctl import
complete -c pinctl -n '__fish_seen_subcommand_from import' -l pin -d 'Pin each reference right after its own import succeeds (and only then)'
complete -c pinctl -n '__fish_seen_subcommand_from import' -l platform -x -d 'Import this platform\'s manifests of a multi-platform image (repeatable)'
complete -c pinctl -n '__fish_seen_subcommand_from import' -l all-platforms -d 'Import the manifests of every platform an index lists'
complete -c pinctl -n '__fish_seen_subcommand_from import' -l snapshotter -x -d 'Unpack for this snapshotter'
complete -c pinctl -n '__fish_seen_subcommand_from import' -l max-usage -x -d 'Import nothing that would take the image filesystem past this usage'
complete -c pinctl -n '__fish_seen_subcommand_from import' -l kubelet-config -r -F -d 'The kubelet\'s config file to read the image GC high threshold from'
complete -c pinctl -n '__fish_seen_subcommand_from import' -l import-timeout -x -d 'Give up on one blob\'s write, one layer\'s unpack or Docker\'s load after this long'
complete -c pinctl -n '__fish_seen_subcommand_from import' -s o -l output -x -a 'table json' -d 'Output format'
complete -c pinctl -n '__fish_seen_subcommand_from import' -s h -l help -d 'Show this message and exit'
complete -c pinctl -n '__fish_seen_subcommand_from import' -s n -l namespace -x -a '(__fish_pinctl_namespaces)' -d 'containerd namespace, repeatable; \'all\' for every one'
complete -c pinctl -n '__fish_seen_subcommand_from import' -s a -l address -r -F -d 'containerd socket'
complete -c pinctl -n '__fish_seen_subcommand_from import' -l timeout -x -d 'Seconds to wait for each answer from the engine (0.05 to 86400)'
complete -c pinctl -n '__fish_seen_subcommand_from import' -l containerd-config -r -F -d 'containerd config to read the CRI sandbox image and (containerd 2.x) pinned_images from'
complete -c pinctl -n '__fish_seen_subcommand_from import' -l crio-config -r -F -d 'CRI-O config to read pinned_images and pause_image from (its drop-ins: PATH.d)'
complete -c pinctl -n '__fish_seen_subcommand_from import' -l kubelet-root-dir -r -F -d 'The kubelet\'s --root-dir: check reads its image pull records there'
complete -c pinctl -n '__fish_seen_subcommand_from import' -l docker-host -x -d 'Docker daemon, as in DOCKER_HOST'
complete -c pinctl -n '__fish_seen_subcommand_from import' -s r -l runtime-endpoint -x -d 'CRI runtime socket (ls --cri, check)'
complete -c pinctl -n '__fish_seen_subcommand_from import' -l pinned-image -x -d 'Add a pinned-image pattern (exact, glob \'repo/*\' or keyword \'*word*\'); repeatable'
complete -c pinctl -n '__fish_seen_subcommand_from import' -l pattern-dialect -x -a 'pinctl crio' -d 'How patterns match: pinctl (strict) or crio (exactly as CRI-O)'
complete -c pinctl -n '__fish_seen_subcommand_from import' -l import-dir -r -F -d 'A directory of image archives for sync to import and pin (repeatable)'
complete -c pinctl -n '__fish_seen_subcommand_from import' -l history-dir -r -F -d 'Directory of the deletion journal (sync --watch, cri-proxy, history)'
complete -c pinctl -n '__fish_seen_subcommand_from import' -l kubelet-log -r -F -d 'The kubelet\'s log file, read to tell its image GC\'s deletions (sync --watch)'
complete -c pinctl -n '__fish_seen_subcommand_from import' -l metrics-address -x -d 'Serve Prometheus metrics (/metrics), /healthz and /readyz on HOST:PORT; an empty HOST...'
complete -c pinctl -n '__fish_seen_subcommand_from import' -l config -r -F -d 'pinctl config file; drop-ins come from config.d beside it'
complete -c pinctl -n '__fish_seen_subcommand_from import' -l from-crio -r -F -d 'Add CRI-O\'s pinned_images (crio dialect) from PATH and PATH.d/'
complete -c pinctl -n '__fish_seen_subcommand_from import' -F

# pinctl ls
complete -c pinctl -n '__fish_seen_subcommand_from ls' -l pinned -l unpinned -d 'Only images the runtime keeps (--pinned), or only those the GC may delete (--unpinned)'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -l drift -d 'Only where labels and policy disagree: covered by a pattern but not labelled, or...'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -l cri -d 'Add CRI PINNED: what the runtime tells the kubelet'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -l id-refs -d 'Also list the sha256:<id> reference containerd\'s CRI adds to each image that has a...'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -s o -l output -x -a 'table wide json' -d 'Output format'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -s q -l quiet -d 'Print only references, one per line'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -s h -l help -d 'Show this message and exit'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -s n -l namespace -x -a '(__fish_pinctl_namespaces)' -d 'containerd namespace, repeatable; \'all\' for every one'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -s a -l address -r -F -d 'containerd socket'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -l timeout -x -d 'Seconds to wait for each answer from the engine (0.05 to 86400)'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -l containerd-config -r -F -d 'containerd config to read the CRI sandbox image and (containerd 2.x) pinned_images from'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -l crio-config -r -F -d 'CRI-O config to read pinned_images and pause_image from (its drop-ins: PATH.d)'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -l kubelet-root-dir -r -F -d 'The kubelet\'s --root-dir: check reads its image pull records there'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -l docker-host -x -d 'Docker daemon, as in DOCKER_HOST'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -s r -l runtime-endpoint -x -d 'CRI runtime socket (ls --cri, check)'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -l pinned-image -x -d 'Add a pinned-image pattern (exact, glob \'repo/*\' or keyword \'*word*\'); repeatable'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -l pattern-dialect -x -a 'pinctl crio' -d 'How patterns match: pinctl (strict) or crio (exactly as CRI-O)'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -l import-dir -r -F -d 'A directory of image archives for sync to import and pin (repeatable)'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -l history-dir -r -F -d 'Directory of the deletion journal (sync --watch, cri-proxy, history)'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -l kubelet-log -r -F -d 'The kubelet\'s log file, read to tell its image GC\'s deletions (sync --watch)'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -l metrics-address -x -d 'Serve Prometheus metrics (/metrics), /healthz and /readyz on HOST:PORT; an empty HOST...'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -l config -r -F -d 'pinctl config file; drop-ins come from config.d beside it'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -l from-crio -r -F -d 'Add CRI-O\'s pinned_images (crio dialect) from PATH and PATH.d/'
complete -c pinctl -n '__fish_seen_subcommand_from ls' -a '(__fish_pinctl_refs)'

# pinctl namespaces
complete -c pinctl -n '__fish_seen_subcommand_from namespaces' -s q -l quiet -d 'Names only (what shell completion reads)'
complete -c pinctl -n '__fish_seen_subcommand_from namespaces' -s h -l help -d 'Show this message and exit'
complete -c pinctl -n '__fish_seen_subcommand_from namespaces' -s n -l namespace -x -a '(__fish_pinctl_namespaces)' -d 'containerd namespace, repeatable; \'all\' for every one'
complete -c pinctl -n '__fish_seen_subcommand_from namespaces' -s a -l address -r -F -d 'containerd socket'
complete -c pinctl -n '__fish_seen_subcommand_from namespaces' -l timeout -x -d 'Seconds to wait for each answer from the engine (0.05 to 86400)'
complete -c pinctl -n '__fish_seen_subcommand_from namespaces' -l containerd-config -r -F -d 'containerd config to read the CRI sandbox image and (containerd 2.x) pinned_images from'
complete -c pinctl -n '__fish_seen_subcommand_from namespaces' -l crio-config -r -F -d 'CRI-O config to read pinned_images and pause_image from (its drop-ins: PATH.d)'
complete -c pinctl -n '__fish_seen_subcommand_from namespaces' -l kubelet-root-dir -r -F -d 'The kubelet\'s --root-dir: check reads its image pull records there'
complete -c pinctl -n '__fish_seen_subcommand_from namespaces' -l docker-host -x -d 'Docker daemon, as in DOCKER_HOST'
complete -c pinctl -n '__fish_seen_subcommand_from namespaces' -s r -l runtime-endpoint -x -d 'CRI runtime socket (ls --cri, check)'
complete -c pinctl -n '__fish_seen_subcommand_from namespaces' -l pinned-image -x -d 'Add a pinned-image pattern (exact, glob \'repo/*\' or keyword \'*word*\'); repeatable'
complete -c pinctl -n '__fish_seen_subcommand_from namespaces' -l pattern-dialect -x -a 'pinctl crio' -d 'How patterns match: pinctl (strict) or crio (exactly as CRI-O)'
complete -c pinctl -n '__fish_seen_subcommand_from namespaces' -l import-dir -r -F -d 'A directory of image archives for sync to import and pin (repeatable)'
complete -c pinctl -n '__fish_seen_subcommand_from namespaces' -l history-dir -r -F -d 'Directory of the deletion journal (sync --watch, cri-proxy, history)'
complete -c pinctl -n '__fish_seen_subcommand_from namespaces' -l kubelet-log -r -F -d 'The kubelet\'s log file, read to tell its image GC\'s deletions (sync --watch)'
complete -c pinctl -n '__fish_seen_subcommand_from namespaces' -l metrics-address -x -d 'Serve Prometheus metrics (/metrics), /healthz and /readyz on HOST:PORT; an empty HOST...'
complete -c pinctl -n '__fish_seen_subcommand_from namespaces' -l config -r -F -d 'pinctl config file; drop-ins come from config.d beside it'
complete -c pinctl -n '__fish_seen_subcommand_from namespaces' -l from-crio -r -F -d 'Add CRI-O\'s pinned_images (crio dialect) from PATH and PATH.d/'

# pinctl options
complete -c pinctl -n '__fish_seen_subcommand_from options' -s h -l help -d 'Show this message and exit'
complete -c pinctl -n '__fish_seen_subcommand_from options' -s n -l namespace -x -a '(__fish_pinctl_namespaces)' -d 'containerd namespace, repeatable; \'all\' for every one'
complete -c pinctl -n '__fish_seen_subcommand_from options' -s a -l address -r -F -d 'containerd socket'
complete -c pinctl -n '__fish_seen_subcommand_from options' -l timeout -x -d 'Seconds to wait for each answer from the engine (0.05 to 86400)'
complete -c pinctl -n '__fish_seen_subcommand_from options' -l containerd-config -r -F -d 'containerd config to read the CRI sandbox image and (containerd 2.x) pinned_images from'
complete -c pinctl -n '__fish_seen_subcommand_from options' -l crio-config -r -F -d 'CRI-O config to read pinned_images and pause_image from (its drop-ins: PATH.d)'
complete -c pinctl -n '__fish_seen_subcommand_from options' -l kubelet-root-dir -r -F -d 'The kubelet\'s --root-dir: check reads its image pull records there'
complete -c pinctl -n '__fish_seen_subcommand_from options' -l docker-host -x -d 'Docker daemon, as in DOCKER_HOST'
complete -c pinctl -n '__fish_seen_subcommand_from options' -s r -l runtime-endpoint -x -d 'CRI runtime socket (ls --cri, check)'
complete -c pinctl -n '__fish_seen_subcommand_from options' -l pinned-image -x -d 'Add a pinned-image pattern (exact, glob \'repo/*\' or keyword \'*word*\'); repeatable'
complete -c pinctl -n '__fish_seen_subcommand_from options' -l pattern-dialect -x -a 'pinctl crio' -d 'How patterns match: pinctl (strict) or crio (exactly as CRI-O)'
complete -c pinctl -n '__fish_seen_subcommand_from options' -l import-dir -r -F -d 'A directory of image archives for sync to import and pin (repeatable)'
complete -c pinctl -n '__fish_seen_subcommand_from options' -l history-dir -r -F -d 'Directory of the deletion journal (sync --watch, cri-proxy, history)'
complete -c pinctl -n '__fish_seen_subcommand_from options' -l kubelet-log -r -F -d 'The kubelet\'s log file, read to tell its image GC\'s deletions (sync --watch)'
complete -c pinctl -n '__fish_seen_subcommand_from options' -l metrics-address -x -d 'Serve Prometheus metrics (/metrics), /healthz and /readyz on HOST:PORT; an empty HOST...'
complete -c pinctl -n '__fish_seen_subcommand_from options' -l config -r -F -d 'pinctl config file; drop-ins come from config.d beside it'
complete -c pinctl -n '__fish_seen_subcommand_from options' -l from-crio -r -F -d 'Add CRI-O\'s pinned_images (crio dialect) from PATH and PATH.d/'

# pinctl pin
complete -c pinctl -n '__fish_seen_subcommand_from pin' -s o -l output -x -a 'table wide json' -d 'Output format'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -s q -l quiet -d 'Print only references, one per line'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -l dry-run -d 'Show the plan; change nothing'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -s h -l help -d 'Show this message and exit'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -s n -l namespace -x -a '(__fish_pinctl_namespaces)' -d 'containerd namespace, repeatable; \'all\' for every one'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -s a -l address -r -F -d 'containerd socket'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -l timeout -x -d 'Seconds to wait for each answer from the engine (0.05 to 86400)'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -l containerd-config -r -F -d 'containerd config to read the CRI sandbox image and (containerd 2.x) pinned_images from'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -l crio-config -r -F -d 'CRI-O config to read pinned_images and pause_image from (its drop-ins: PATH.d)'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -l kubelet-root-dir -r -F -d 'The kubelet\'s --root-dir: check reads its image pull records there'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -l docker-host -x -d 'Docker daemon, as in DOCKER_HOST'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -s r -l runtime-endpoint -x -d 'CRI runtime socket (ls --cri, check)'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -l pinned-image -x -d 'Add a pinned-image pattern (exact, glob \'repo/*\' or keyword \'*word*\'); repeatable'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -l pattern-dialect -x -a 'pinctl crio' -d 'How patterns match: pinctl (strict) or crio (exactly as CRI-O)'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -l import-dir -r -F -d 'A directory of image archives for sync to import and pin (repeatable)'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -l history-dir -r -F -d 'Directory of the deletion journal (sync --watch, cri-proxy, history)'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -l kubelet-log -r -F -d 'The kubelet\'s log file, read to tell its image GC\'s deletions (sync --watch)'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -l metrics-address -x -d 'Serve Prometheus metrics (/metrics), /healthz and /readyz on HOST:PORT; an empty HOST...'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -l config -r -F -d 'pinctl config file; drop-ins come from config.d beside it'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -l from-crio -r -F -d 'Add CRI-O\'s pinned_images (crio dialect) from PATH and PATH.d/'
complete -c pinctl -n '__fish_seen_subcommand_from pin' -a '(__fish_pinctl_refs)'

# pinctl prune
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l until-usage -x -d 'Delete until the image filesystem is this full'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l all-unused -d 'Delete every image nothing protects, whatever the usage'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l older-than -x -d 'Only images first seen longer ago than this (raises the minimum age)'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l dry-run -d 'Show the plan; delete nothing'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -s y -l yes -d 'Delete without asking (scripts)'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l kubelet-config -r -F -d 'The kubelet\'s config file, for its GC settings'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l high-threshold -x -d 'imageGCHighThresholdPercent: usage at which the GC starts (kubelet default 85)'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l low-threshold -x -d 'imageGCLowThresholdPercent: usage the GC frees down to (kubelet default 80)'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l min-age -x -d 'imageMinimumGCAge: younger images are never deleted (kubelet default 2m)'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l max-age -x -d 'imageMaximumGCAge: images unused this long go at any usage (kubelet default 0: off)'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -s o -l output -x -a 'table wide json' -d 'Output format'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -s h -l help -d 'Show this message and exit'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -s n -l namespace -x -a '(__fish_pinctl_namespaces)' -d 'containerd namespace, repeatable; \'all\' for every one'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -s a -l address -r -F -d 'containerd socket'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l timeout -x -d 'Seconds to wait for each answer from the engine (0.05 to 86400)'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l containerd-config -r -F -d 'containerd config to read the CRI sandbox image and (containerd 2.x) pinned_images from'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l crio-config -r -F -d 'CRI-O config to read pinned_images and pause_image from (its drop-ins: PATH.d)'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l kubelet-root-dir -r -F -d 'The kubelet\'s --root-dir: check reads its image pull records there'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l docker-host -x -d 'Docker daemon, as in DOCKER_HOST'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -s r -l runtime-endpoint -x -d 'CRI runtime socket (ls --cri, check)'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l pinned-image -x -d 'Add a pinned-image pattern (exact, glob \'repo/*\' or keyword \'*word*\'); repeatable'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l pattern-dialect -x -a 'pinctl crio' -d 'How patterns match: pinctl (strict) or crio (exactly as CRI-O)'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l import-dir -r -F -d 'A directory of image archives for sync to import and pin (repeatable)'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l history-dir -r -F -d 'Directory of the deletion journal (sync --watch, cri-proxy, history)'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l kubelet-log -r -F -d 'The kubelet\'s log file, read to tell its image GC\'s deletions (sync --watch)'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l metrics-address -x -d 'Serve Prometheus metrics (/metrics), /healthz and /readyz on HOST:PORT; an empty HOST...'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l config -r -F -d 'pinctl config file; drop-ins come from config.d beside it'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -l from-crio -r -F -d 'Add CRI-O\'s pinned_images (crio dialect) from PATH and PATH.d/'
complete -c pinctl -n '__fish_seen_subcommand_from prune' -a '(__fish_pinctl_refs)'

# pinctl pull
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l pin -d 'Pin each image right after its pull succeeds (and only then)'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l registry-config -r -F -d 'Docker\'s config.json whose auths are passed with each pull, beside the runtime\'s own...'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l max-usage -x -d 'Pull nothing that would take the image filesystem past this usage'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l kubelet-config -r -F -d 'The kubelet\'s config file, for its GC high threshold'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l parallel -x -d 'Pulls at a time (1 to 32)'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l pull-timeout -x -d 'Give up on one pull after this long'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l retries -x -d 'Retries HTTP 429, 5xx or unavailable, after 1, 2, 4..'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l always -d 'Pull again even when the image is present (its pin labels are kept)'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -s o -l output -x -a 'table wide json' -d 'Output format'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -s h -l help -d 'Show this message and exit'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -s n -l namespace -x -a '(__fish_pinctl_namespaces)' -d 'containerd namespace, repeatable; \'all\' for every one'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -s a -l address -r -F -d 'containerd socket'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l timeout -x -d 'Seconds to wait for each answer from the engine (0.05 to 86400)'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l containerd-config -r -F -d 'containerd config to read the CRI sandbox image and (containerd 2.x) pinned_images from'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l crio-config -r -F -d 'CRI-O config to read pinned_images and pause_image from (its drop-ins: PATH.d)'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l kubelet-root-dir -r -F -d 'The kubelet\'s --root-dir: check reads its image pull records there'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l docker-host -x -d 'Docker daemon, as in DOCKER_HOST'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -s r -l runtime-endpoint -x -d 'CRI runtime socket (ls --cri, check)'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l pinned-image -x -d 'Add a pinned-image pattern (exact, glob \'repo/*\' or keyword \'*word*\'); repeatable'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l pattern-dialect -x -a 'pinctl crio' -d 'How patterns match: pinctl (strict) or crio (exactly as CRI-O)'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l import-dir -r -F -d 'A directory of image archives for sync to import and pin (repeatable)'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l history-dir -r -F -d 'Directory of the deletion journal (sync --watch, cri-proxy, history)'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l kubelet-log -r -F -d 'The kubelet\'s log file, read to tell its image GC\'s deletions (sync --watch)'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l metrics-address -x -d 'Serve Prometheus metrics (/metrics), /healthz and /readyz on HOST:PORT; an empty HOST...'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l config -r -F -d 'pinctl config file; drop-ins come from config.d beside it'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -l from-crio -r -F -d 'Add CRI-O\'s pinned_images (crio dialect) from PATH and PATH.d/'
complete -c pinctl -n '__fish_seen_subcommand_from pull' -a '(__fish_pinctl_refs)'

# pinctl sync
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l prune -d 'Also unpin what sync pinned and no pattern covers'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l allow-empty-policy -d 'Let --prune run with no patterns at all (it then removes every pin sync added)'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l dry-run -d 'Show the plan; change nothing'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l watch -d 'Keep running: sync at start, after every reconnect and as each image changes'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l log-format -x -a 'text json' -d 'With --watch: log as text or JSON'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l check-interval -x -d 'With --watch: read the whole node this often (metrics, --node-status); 0: never'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l kubelet-config -r -F -d 'With --watch or --pull: the kubelet\'s config (GC thresholds)'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l node-status -x -d 'With --watch: write this Node\'s pinctl condition and Events (docs/fleet-status.md)'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l status-heartbeat -x -d 'With --node-status: rewrite an unchanged condition this often'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l pull -d 'First pull the policy\'s exact references the node lacks (as pinctl pull), then sync'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l registry-config -r -F -d 'Docker\'s config.json whose auths are passed with each pull, beside the runtime\'s own...'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l max-usage -x -d 'Pull nothing that would take the image filesystem past this usage'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l parallel -x -d 'Pulls at a time (1 to 32)'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l pull-timeout -x -d 'Give up on one pull after this long'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l retries -x -d 'Retries HTTP 429, 5xx or unavailable, after 1, 2, 4..'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l always -d 'Pull again even when the image is present (its pin labels are kept)'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -s o -l output -x -a 'table wide json' -d 'Output format'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -s q -l quiet -d 'Print only references, one per line'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -s h -l help -d 'Show this message and exit'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -s n -l namespace -x -a '(__fish_pinctl_namespaces)' -d 'containerd namespace, repeatable; \'all\' for every one'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -s a -l address -r -F -d 'containerd socket'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l timeout -x -d 'Seconds to wait for each answer from the engine (0.05 to 86400)'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l containerd-config -r -F -d 'containerd config to read the CRI sandbox image and (containerd 2.x) pinned_images from'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l crio-config -r -F -d 'CRI-O config to read pinned_images and pause_image from (its drop-ins: PATH.d)'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l kubelet-root-dir -r -F -d 'The kubelet\'s --root-dir: check reads its image pull records there'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l docker-host -x -d 'Docker daemon, as in DOCKER_HOST'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -s r -l runtime-endpoint -x -d 'CRI runtime socket (ls --cri, check)'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l pinned-image -x -d 'Add a pinned-image pattern (exact, glob \'repo/*\' or keyword \'*word*\'); repeatable'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l pattern-dialect -x -a 'pinctl crio' -d 'How patterns match: pinctl (strict) or crio (exactly as CRI-O)'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l import-dir -r -F -d 'A directory of image archives for sync to import and pin (repeatable)'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l history-dir -r -F -d 'Directory of the deletion journal (sync --watch, cri-proxy, history)'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l kubelet-log -r -F -d 'The kubelet\'s log file, read to tell its image GC\'s deletions (sync --watch)'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l metrics-address -x -d 'Serve Prometheus metrics (/metrics), /healthz and /readyz on HOST:PORT; an empty HOST...'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l config -r -F -d 'pinctl config file; drop-ins come from config.d beside it'
complete -c pinctl -n '__fish_seen_subcommand_from sync' -l from-crio -r -F -d 'Add CRI-O\'s pinned_images (crio dialect) from PATH and PATH.d/'

# pinctl unpin
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -s o -l output -x -a 'table wide json' -d 'Output format'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -s q -l quiet -d 'Print only references, one per line'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -l dry-run -d 'Show the plan; change nothing'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -s h -l help -d 'Show this message and exit'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -s n -l namespace -x -a '(__fish_pinctl_namespaces)' -d 'containerd namespace, repeatable; \'all\' for every one'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -s a -l address -r -F -d 'containerd socket'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -l timeout -x -d 'Seconds to wait for each answer from the engine (0.05 to 86400)'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -l containerd-config -r -F -d 'containerd config to read the CRI sandbox image and (containerd 2.x) pinned_images from'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -l crio-config -r -F -d 'CRI-O config to read pinned_images and pause_image from (its drop-ins: PATH.d)'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -l kubelet-root-dir -r -F -d 'The kubelet\'s --root-dir: check reads its image pull records there'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -l docker-host -x -d 'Docker daemon, as in DOCKER_HOST'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -s r -l runtime-endpoint -x -d 'CRI runtime socket (ls --cri, check)'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -l pinned-image -x -d 'Add a pinned-image pattern (exact, glob \'repo/*\' or keyword \'*word*\'); repeatable'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -l pattern-dialect -x -a 'pinctl crio' -d 'How patterns match: pinctl (strict) or crio (exactly as CRI-O)'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -l import-dir -r -F -d 'A directory of image archives for sync to import and pin (repeatable)'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -l history-dir -r -F -d 'Directory of the deletion journal (sync --watch, cri-proxy, history)'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -l kubelet-log -r -F -d 'The kubelet\'s log file, read to tell its image GC\'s deletions (sync --watch)'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -l metrics-address -x -d 'Serve Prometheus metrics (/metrics), /healthz and /readyz on HOST:PORT; an empty HOST...'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -l config -r -F -d 'pinctl config file; drop-ins come from config.d beside it'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -l from-crio -r -F -d 'Add CRI-O\'s pinned_images (crio dialect) from PATH and PATH.d/'
complete -c pinctl -n '__fish_seen_subcommand_from unpin' -a '(__fish_pinctl_pinned_refs)'
