# _pinctl_ask KIND ARG...: run pinctl ARG... with the engine options typed on the line (and for
# KIND refs the namespaces too). Errors go to /dev/null: completion must stay quiet.
_pinctl_ask() {
  local kind=$1 prog=${_pinctl_words[1]:-pinctl} word
  local -a pass
  local -i i
  shift
  # An option is being typed, not a value: starting pinctl would only slow the prompt.
  [[ $PREFIX == -* ]] && return 1
  [[ $prog == */* && -x ${~prog} ]] && prog=${~prog} || prog=pinctl
  (( $+commands[$prog] )) || [[ -x $prog ]] || return 1
  for (( i = 2; i <= $#_pinctl_words; i++ )); do
    (( i == _pinctl_current )) && continue
    word=$_pinctl_words[i]
    case $word in
    # @ARMS@
    esac
  done
  $prog "$@" "${pass[@]}" 2>/dev/null </dev/null
}

_pinctl_refs() {
  local -a refs expl
  refs=(${(f)"$(_pinctl_ask refs @REFS@)"})
  _wanted images expl 'image reference' compadd -a refs
}

_pinctl_pinned_refs() {
  local -a refs expl
  refs=(${(f)"$(_pinctl_ask refs @PINNED_REFS@)"})
  _wanted images expl 'pinned image reference' compadd -a refs
}

_pinctl_deleted_refs() {
  local -a refs expl
  refs=(${(f)"$(_pinctl_ask refs @DELETED_REFS@)"})
  _wanted images expl 'image reference the deletion journal names' compadd -a refs
}

_pinctl_namespaces() {
  local -a names expl
  names=(${(f)"$(_pinctl_ask namespaces @NAMESPACES@)"})
  _wanted namespaces expl 'containerd namespace' compadd -a names
}

_pinctl() {
  # Nested _arguments shift $words; the typed engine options are read from the whole line.
  local -a _pinctl_words=("${words[@]}")
  local -i _pinctl_current=$CURRENT
  @ROOT_COMMAND@ "$@"
}

# Autoloaded from $fpath, this file is the body of _pinctl: define, then complete. Sourced
# (source <(pinctl completion zsh), after compinit), it registers itself.
if [[ $funcstack[1] == _pinctl ]]; then
  _pinctl "$@"
else
  compdef _pinctl pinctl
fi
