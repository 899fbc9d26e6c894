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
            # @ARMS@
        end
        set i (math $i + 1)
    end
    command -q $prog; or return 0
    command $prog $argv $pass 2>/dev/null </dev/null
end

function __fish_pinctl_refs --description 'Image references pinctl ls -q lists'
    __fish_pinctl_ask refs @REFS@
end

function __fish_pinctl_pinned_refs --description 'Pinned image references pinctl ls -q --pinned lists'
    __fish_pinctl_ask refs @PINNED_REFS@
end

function __fish_pinctl_deleted_refs --description 'Image references pinctl history -q --all lists'
    __fish_pinctl_ask refs @DELETED_REFS@
end

function __fish_pinctl_namespaces --description 'containerd namespaces pinctl namespaces -q lists'
    __fish_pinctl_ask namespaces @NAMESPACES@
end

# Sourcing twice must not double every line.
complete -c pinctl -e
# Arguments are commands and image references, never file names (values may be).
complete -c pinctl -f
