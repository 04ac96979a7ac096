# tether's cell wrapper for a POSIX sh (dash): the functions the one-line
# cell script (core/src/agent/shell.rs) calls around the user's code. What
# POSIX sh can list is kept: variables (`set`), exports, readonly, the
# working directory, umask, traps but EXIT, the `set` flags, and the
# positional parameters. Functions and aliases cannot be listed in dash,
# so they do not persist; a user's EXIT trap replaces tether's (a cell
# that sets one and then exits early keeps the previous state, with a
# note). @MARKER@ is filled in by shell.rs.

__tether_begin() {
  __tether_state=$1 __tether_cell=$2 __tether_pre= __tether_pwd=
  __tether_ppid=$PPID
  trap __tether_term TERM
  if [ -s "$__tether_state/note" ]; then
    cat "$__tether_state/note" >&2
    : >| "$__tether_state/note"
  fi
  __tether_snap=
  if [ -f "$__tether_state/shell" ]; then
    __tether_snap=$(cat "$__tether_state/shell")
  fi
  __tether_code=$(cat "$__tether_cell/code"; printf x)
  __tether_code=${__tether_code%x}
}

# After the snapshot (which also assigned tether's and the shell's own
# variables as they were): this cell's values again, then the directory,
# and PWD and OLDPWD (which the `cd` sets) as the snapshot has them.
__tether_fix() {
  __tether_cell=$1
  PPID=$__tether_ppid
  if [ -n "${__tether_pwd-}" ]; then
    __tether_p=${PWD-} __tether_op=${OLDPWD-} __tether_os=${OLDPWD+1}
    __tether_cd "$__tether_pwd"
    PWD=$__tether_p
    if [ -n "$__tether_os" ]; then OLDPWD=$__tether_op; else unset OLDPWD; fi
    unset __tether_p __tether_op __tether_os
  fi
  unset __tether_snap __tether_ppid
  __tether_opts "${__tether_f-}"
}

# The snapshot's working directory. One removed since the save (or that
# cannot be entered any more) cannot be a new shell's: the cell starts in
# the nearest directory above it that can be entered (else $HOME) and
# says so.
__tether_cd() {
  cd -- "$1" 2>/dev/null && return
  __tether_up=$1 __tether_in=
  while [ -z "$__tether_in" ]; do
    case $__tether_up in */*) ;; *) break ;; esac
    __tether_up=${__tether_up%/*}
    ! cd -- "${__tether_up:-/}" 2>/dev/null || __tether_in=1
  done
  [ -n "$__tether_in" ] || cd 2>/dev/null || :
  __tether_why='no longer exists'
  [ ! -e "$1" ] || __tether_why='cannot be entered'
  printf 'tether: the working directory %s %s; this cell starts in %s\n' \
    "$1" "$__tether_why" "$PWD" >&2
  unset __tether_up __tether_in __tether_why
}

# `set` flags as saved in $1 (`$-`, kept in __tether_f), applied last; xtrace and verbose start
# with the code.
__tether_opts() {
  __tether_pre=
  for __tether_o in a C e f u; do
    case $1 in
      *"$__tether_o"*) set -"$__tether_o" ;;
      *) set +"$__tether_o" ;;
    esac
  done
  case $1 in *x*) __tether_pre="set -x;" ;; esac
  case $1 in *v*) __tether_pre="$__tether_pre set -v;" ;; esac
}

# Returns the previous cell's status, so the code starts with it as `$?`.
__tether_arm() {
  trap '{ __tether_save "$@"; } 2>/dev/null' EXIT
  return "${__tether_last:-0}"
}

__tether_term() { exit 143; }

# The positional parameters ($@), quoted for `eval "set -- …"`, in
# __tether_argv (saved with the variables).
__tether_quote() {
  __tether_argv=
  for __tether_a; do
    __tether_q=
    while :; do
      case $__tether_a in
        *\'*)
          __tether_q=$__tether_q${__tether_a%%\'*}"'\\''"
          __tether_a=${__tether_a#*\'}
          ;;
        *) break ;;
      esac
    done
    __tether_argv="$__tether_argv '$__tether_q$__tether_a'"
  done
  unset __tether_a __tether_q
}

# Writes the state to shell.new, last line `#tether-end`. Its arguments
# are the positional parameters to keep (from __tether_end, after the
# status, which it takes as the last one; dash runs the EXIT trap with the top level's, even when the
# shell exits inside a function).
__tether_save() {
  __tether_last=$?
  if [ -n "${__tether_ending-}" ]; then
    __tether_last=$1
    shift
  fi
  trap - EXIT
  __tether_f=$-
  set +euvx
  # dash finds the special builtins (trap, set, unset, export, readonly)
  # before functions, the others not: a user's function named after one
  # the save calls goes (functions do not persist under dash anyway)
  unset -f printf umask pwd echo command [ test
  __tether_quote "$@"
  trap >| "$__tether_cell/shell.new" || return
  trap '' TERM
  unset @MARKER@ TETHER_CALL TETHER_CALL_TOKEN __tether_code __tether_o __tether_ending
  # the shell's working directory, not $PWD where the user assigned or
  # unset it (dash's `pwd` still prints the directory; a process is
  # started only then)
  __tether_pwd=${PWD-}
  case $__tether_pwd in
    /*) [ "$__tether_pwd" -ef . ] ;;
    *) false ;;
  esac || {
    __tether_pwd=$(pwd; echo x)
    __tether_pwd=${__tether_pwd%?x}
  }
  {
    set
    export -p
    readonly -p
    printf 'umask %s\n#tether-end\n' "$(umask)"
  } >> "$__tether_cell/shell.new"
}

__tether_end() {
  __tether_ending=1
  __tether_save "$@"
  printf '%s\n' "$1" >| "$__tether_cell/end"
}
