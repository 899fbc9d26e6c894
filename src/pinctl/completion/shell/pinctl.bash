# _pinctl_node PATH: the subcommands, the options taking a value (optval: those that may go
# without one) and all the options of one command, padded with blanks for a cheap lookup.
_pinctl_node() {
    case $1 in
    # @NODES@
    *) subs='' valued=' ' optval=' ' opts='' ;;
    esac
}

# _pinctl_keep OPTION VALUE: keep the typed options that choose the engine, for the calls to
# pinctl (namespaces only for image references). Quotes go, as the shell would remove them;
# nothing typed is ever evaluated.
_pinctl_keep() {
    local value=$2
    [[ $value == \'*\' || $value == \"*\" ]] && value=${value:1:${#value}-2}
    case $1 in
    # @KEEP@
    esac
}

# _pinctl_value KEY WORD: complete an option's value (KEY is 'PATH|OPTION') or a positional
# argument (KEY is 'PATH|#N', N counting from 0) that starts with WORD.
_pinctl_value() {
    case $1 in
    # @VALUES@
    esac
}


# _pinctl_add WORD CANDIDATE...: offer the candidates that start with WORD.
_pinctl_add() {
    local word=$1 candidate
    shift
    for candidate; do
        [[ $candidate == "$word"* ]] && COMPREPLY+=("$candidate")
    done
}

# _pinctl_ask WORD ARG...: offer the lines of `pinctl ARG...` that start with WORD. A dead socket
# or a missing permission must not print into the prompt, so errors go to /dev/null.
_pinctl_ask() {
    local word=$1 out
    shift
    out=$("$prog" "$@" "${pass[@]}" 2>/dev/null </dev/null)
    [[ -n $out ]] || return 0
    local -a lines
    mapfile -t lines <<<"$out"
    _pinctl_add "$word" "${lines[@]}"
}

# _pinctl_files: let readline complete file names (it quotes them and marks directories).
_pinctl_files() {
    compopt -o default 2>/dev/null
}

# _pinctl_option WORD: note an option typed before the cursor; the next word may be its value.
_pinctl_option() {
    _pinctl_node "$node"
    case $1 in
    --*=*) _pinctl_keep "${1%%=*}" "${1#*=}" ;;
    --*) [[ $valued == *" $1 "* ]] && pending=$1 ;;
    *)
        if [[ $valued == *" ${1:0:2} "* ]]; then
            if ((${#1} > 2)); then _pinctl_keep "${1:0:2}" "${1:2}"; else pending=$1; fi
        fi
        ;;
    esac
}

# _pinctl_trim WORD: readline replaces only the text after the last '=' or ':' it breaks words
# at, so drop what comes before it from the candidates (refs hold ':').
_pinctl_trim() {
    local tail=$1
    [[ $COMP_WORDBREAKS == *=* ]] && tail=${tail##*=}
    [[ $COMP_WORDBREAKS == *:* ]] && tail=${tail##*:}
    local head=${1%"$tail"}
    if [[ -n $head && ${#COMPREPLY[@]} -gt 0 ]]; then
        COMPREPLY=("${COMPREPLY[@]#"$head"}")
    fi
}

_pinctl() {
    COMPREPLY=()
    local IFS=$' \t\n' line=${COMP_LINE:0:COMP_POINT}
    local -a words pass=() nspass=()
    read -r -a words <<<"$line"
    # A blank before the cursor starts a new, empty word.
    [[ -z $line || $line == *[[:blank:]] ]] && words+=('')
    local cur=${words[${#words[@]} - 1]} prog=${words[0]} quoted=''
    [[ $prog == */* && -x $prog ]] || prog=pinctl
    # An opening quote is not part of the word readline completes.
    if [[ $cur == [\'\"]* ]]; then
        cur=${cur:1}
        quoted=1
    fi
    local node=pinctl subs valued optval opts pending='' word only_args='' i n=0
    for ((i = 1; i < ${#words[@]} - 1; i++)); do
        word=${words[i]}
        if [[ -n $pending ]] && ! [[ $word == -?* && $optval == *" $pending "* ]]; then
            _pinctl_keep "$pending" "$word"
            pending=''
            continue
        fi
        pending=''
        if [[ -z $only_args && $word == -- ]]; then
            only_args=1
        elif [[ -z $only_args && $word == -?* ]]; then
            _pinctl_option "$word"
        else
            _pinctl_node "$node"
            if [[ -z $only_args && " $subs " == *" $word "* ]]; then
                node+=" $word"
                n=0
            else
                n=$((n + 1))
            fi
        fi
    done
    _pinctl_node "$node"
    if [[ -n $pending ]] && ! [[ $cur == -?* && $optval == *" $pending "* ]]; then
        _pinctl_value "$node|$pending" "$cur"
    elif [[ -z $only_args && $cur == --*=* ]]; then
        _pinctl_value "$node|${cur%%=*}" "${cur#*=}"
        ((${#COMPREPLY[@]})) && COMPREPLY=("${COMPREPLY[@]/#/${cur%%=*}=}")
    elif [[ -z $only_args && $cur == -* ]]; then
        _pinctl_add "$cur" $opts
    elif [[ -n $subs ]]; then
        _pinctl_add "$cur" $subs
    else
        _pinctl_value "$node|#$n" "$cur"
    fi
    [[ -n $quoted ]] || _pinctl_trim "$cur"
    return 0
}

complete -F _pinctl pinctl
