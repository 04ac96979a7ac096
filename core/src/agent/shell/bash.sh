# tether's cell wrapper for bash: the functions the one-line cell script
# (core/src/agent/shell.rs) calls around the user's code. Every name is
# __tether_*, except the `trap` function that keeps a user's EXIT trap
# away from the real one. @MARKER@ is filled in by shell.rs.

# Reads the kernel's snapshot and the cell's code; says on stderr what the
# shim noted about the cell before (a state it could not keep).
__tether_begin() {
  __tether_state=$1 __tether_cell=$2 __tether_pre= __tether_args=()
  __tether_exit_trap= __tether_exit_trap_set=
  __tether_err_trap= __tether_err_trap_set=
  builtin trap '__tether_term "$@"' TERM
  __tether_term_ours=1
  shopt -s expand_aliases
  if [[ -s $__tether_state/note ]]; then
    IFS= read -r -d '' __tether_note < "$__tether_state/note"
    printf '%s' "$__tether_note" >&2
    : >| "$__tether_state/note"
    unset __tether_note
  fi
  __tether_snap=
  if [[ -f $__tether_state/shell ]]; then
    IFS= read -r -d '' __tether_snap < "$__tether_state/shell"
  fi
  __tether_code=
  IFS= read -r -d '' __tether_code < "$__tether_cell/code"
  return 0
}

# The names of the user's variables (saved and restored), in
# __tether_names: not the ones the shell manages, the marker or tether's.
# `compgen` filters and lists them into scratch file $1 (no process is
# started, no loop: this runs twice per cell, each time into a file of
# its own: see `scratch_files` in layout.rs for why no file is written
# twice); extglob is on for the pattern (the user's options are saved
# before and restored after).
__tether_user_vars() {
  shopt -s extglob
  compgen -v -X "$__tether_skip" >| "$__tether_cell/scratch.$1"
  mapfile -t __tether_names < "$__tether_cell/scratch.$1"
}
__tether_skip='@(BASH|BASH_*|BASHOPTS|BASHPID|COMP_*|DIRSTACK|EPOCHREALTIME|EPOCHSECONDS|EUID|FUNCNAME|GROUPS|HISTCMD|LINENO|OLDPWD|PIPESTATUS|PPID|PWD|RANDOM|SECONDS|SHELLOPTS|SHLVL|SRANDOM|UID|_|@MARKER@|TETHER_CALL|TETHER_CALL_TOKEN|__tether_*)'

# At the save, the variables declared but never assigned (`declare -A a`,
# `declare -i n`, `export LATER`) join __tether_names, so that they keep
# their attributes: `compgen -v` skips them. `declare -p` lists every
# variable, one a line (bash 5 writes a value's newline as $'\n'), and
# these without `=` (`declare -A a`). Where an older bash writes a
# newline as is, a line of a value that looks like one names a variable
# that is set (saved twice, harmless) or none (not saved). Scratch file
# $1, as above.
__tether_declared() {
  declare -p >| "$__tether_cell/scratch.$1"
  mapfile -t __tether_d < "$__tether_cell/scratch.$1"
  for __tether_n in "${__tether_d[@]/*=*/}"; do
    __tether_n=${__tether_n##* }
    [[ -z $__tether_n || $__tether_n == $__tether_skip ]] || __tether_names+=("$__tether_n")
  done
  unset __tether_d
}

# The snapshot holds every variable of the user's: the ones this shell
# inherited go first (so an `unset` persists too).
__tether_unset_all() {
  __tether_user_vars tmp
  ((${#__tether_names[@]} == 0)) || unset -v "${__tether_names[@]}"
}

# The directory stack below the current directory, top first.
__tether_dirs() {
  local __tether_i
  for ((__tether_i = $#; __tether_i > 0; __tether_i--)); do
    builtin pushd -n -- "${!__tether_i}" >/dev/null
  done
}

# The snapshot's working directory. One removed since the save (or that
# cannot be entered any more) cannot be a new shell's: the cell starts in
# the nearest directory above it that can be entered (else $HOME) and says
# so (the note waits for __tether_arm: the snapshot's stderr is not shown).
__tether_cd() {
  [[ -z $1 ]] || ! builtin cd -- "$1" 2>/dev/null || return 0
  local __tether_up=$1 __tether_in= __tether_why='no longer exists'
  while [[ -z $__tether_in && $__tether_up == */* ]]; do
    __tether_up=${__tether_up%/*}
    ! builtin cd -- "${__tether_up:-/}" 2>/dev/null || __tether_in=1
  done
  [[ -n $__tether_in ]] || builtin cd
  [[ ! -e $1 ]] || __tether_why='cannot be entered'
  printf -v __tether_cd_note 'tether: the working directory %s %s; this cell starts in %s\n' \
    "$1" "$__tether_why" "$PWD"
}

# Options, as saved ($1 SHELLOPTS, $2 BASHOPTS), applied last. xtrace and
# verbose start with the code (nothing of tether's is traced); options that
# would stop every later cell (noexec, onecmd) or need a terminal are not
# restored.
__tether_opts() {
  local IFS=: __tether_o __tether_on=()
  for __tether_o in $BASHOPTS; do
    [[ :$2: == *:"$__tether_o":* ]] || shopt -u "$__tether_o"
  done
  for __tether_o in $2; do shopt -s "$__tether_o"; done
  for __tether_o in $SHELLOPTS; do
    [[ :$1: == *:"$__tether_o":* ]] || set +o "$__tether_o"
  done
  for __tether_o in $1; do
    case $__tether_o in
      xtrace) __tether_pre+='set -x;' ;;
      verbose) __tether_pre+='set -v;' ;;
      noexec | onecmd | monitor | history | emacs | vi) ;;
      *) __tether_on+=(-o "$__tether_o") ;;
    esac
  done
  set "${__tether_on[@]}"
} 2>/dev/null

# From here on, whatever ends the shell (exit, set -e, set -u, a cancel's
# TERM) saves the state first.
# Returns the previous cell's status, so the code starts with it as `$?`.
__tether_arm() {
  if [[ -n ${__tether_cd_note-} ]]; then
    printf '%s' "$__tether_cd_note" >&2
    unset __tether_cd_note
  fi
  builtin trap '{ __tether_save "$@"; } 2>/dev/null' EXIT
  # The user's ERR trap is set at the start of the code's own eval, on its
  # first line (so `$LINENO` stays the code's), as in the cell that set
  # it: set before the eval, bash would also run it for the eval itself
  # when the code's last command fails. `$?` and `$_` are then the
  # previous cell's again (a failing command that is not the last of an
  # && list fires no ERR trap and stops no `set -e`).
  if [[ -n $__tether_err_trap_set ]]; then
    __tether_pre="builtin trap -- ${__tether_err_trap@Q} ERR; __tether_st && __tether_same ${1@Q}; $__tether_pre"
  fi
  unset __tether_snap
  return "${__tether_last:-0}"
}

# Its argument becomes `$_` (when __tether_arm returned 0): the previous
# cell's last argument where it is known, else empty (never tether's).
__tether_same() { :; }

# The previous cell's status, as __tether_arm returns it.
__tether_st() { return "${__tether_last:-0}"; }

# Called with the positional parameters where the TERM came (the EXIT
# trap then runs in here, and finds them as its own).
__tether_term() { exit 143; }

__tether_is_exit() {
  case ${1^^} in 0 | EXIT | SIGEXIT) return 0 ;; esac
  return 1
}

__tether_is_err() {
  case ${1^^} in ERR | SIGERR) return 0 ;; esac
  return 1
}

__tether_is_term() {
  case ${1^^} in 15 | TERM | SIGTERM) return 0 ;; esac
  return 1
}

# A user's EXIT trap is kept aside (saved with the state, shown by
# `trap -p`) and never fires: the kernel's shell does not exit at the end
# of a cell. The ERR trap is set, and also noted here: bash hides it from
# `trap -p` inside a function (it is not inherited without errtrace), as
# this one and the save are, so the note is what lists and saves it. TERM
# is tether's until the user traps it: it saves the state when a cancel
# comes.
trap() {
  local __tether_s __tether_act __tether_rest=() __tether_print=
  case ${1-} in
    -l) builtin trap "$@"; return ;;
    -p) __tether_print=1; shift ;;
    --) shift ;;
  esac
  if [[ -n $__tether_print ]] || (($# == 0)); then
    # every signal by number (not {1..64}: the user may have turned off
    # brace expansion), in bash's order
    (($# != 0)) || set -- EXIT 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64 DEBUG ERR RETURN
    for __tether_s; do
      if __tether_is_exit "$__tether_s" || __tether_is_err "$__tether_s"; then
        # the ones before it first, in the order asked
        ((${#__tether_rest[@]} == 0)) || builtin trap -p "${__tether_rest[@]}"
        __tether_rest=()
        if __tether_is_exit "$__tether_s"; then
          [[ -z $__tether_exit_trap_set ]] || printf 'trap -- %s EXIT\n' "${__tether_exit_trap@Q}"
        else
          [[ -z $__tether_err_trap_set ]] || printf 'trap -- %s ERR\n' "${__tether_err_trap@Q}"
        fi
      elif ! __tether_is_term "$__tether_s" || [[ -z $__tether_term_ours ]]; then
        __tether_rest+=("$__tether_s")
      fi
    done
    ((${#__tether_rest[@]} == 0)) || builtin trap -p "${__tether_rest[@]}"
    return
  fi
  # One operand, or a first operand that is an unsigned decimal integer
  # naming a signal: every operand is a condition to reset (POSIX; bash:
  # `trap 0 2`, `trap 2 EXIT`). Any other first operand is the action
  # (bash takes `trap 99 INT` as the action 99: no signal 99), so bash's
  # `trap -p` decides what names a signal.
  if (($# == 1)) || { [[ -n $1 && $1 != *[!0-9]* ]] && builtin trap -p -- "$1" >/dev/null 2>&1; }; then
    __tether_act=-
  else
    __tether_act=$1
    shift
  fi
  for __tether_s; do
    if __tether_is_exit "$__tether_s"; then
      if [[ $__tether_act == - ]]; then
        __tether_exit_trap= __tether_exit_trap_set=
      else
        __tether_exit_trap=$__tether_act __tether_exit_trap_set=1
      fi
    elif __tether_is_err "$__tether_s"; then
      if [[ $__tether_act == - ]]; then
        __tether_err_trap= __tether_err_trap_set=
      else
        __tether_err_trap=$__tether_act __tether_err_trap_set=1
      fi
      __tether_rest+=("$__tether_s")
    elif __tether_is_term "$__tether_s" && [[ $__tether_act == - || $__tether_act == __tether_term || $__tether_act == '__tether_term "$@"' ]]; then
      builtin trap '__tether_term "$@"' TERM
      __tether_term_ours=1
    else
      ! __tether_is_term "$__tether_s" || __tether_term_ours=
      __tether_rest+=("$__tether_s")
    fi
  done
  ((${#__tether_rest[@]} == 0)) || builtin trap -- "$__tether_act" "${__tether_rest[@]}"
}

# Writes the whole state to shell.new, last line `#tether-end` (the shim
# takes the file only with it). Builtins only: no process is started.
# Traps are listed before TERM is ignored: a cancel that comes now does not
# cut the save short (the escalation's KILL still ends it on time).
# Its arguments are the positional parameters where it was called: the
# top level's from __tether_end (after the status), from the EXIT trap at
# top level, or from __tether_term at top level. An exit inside a function
# (or a sourced file) has only that function's: there the ones the cell
# started with are kept (__tether_args, set by the snapshot).
__tether_save() {
  __tether_last=$? __tether_us=$_
  case ${#FUNCNAME[@]}:${FUNCNAME[1]-} in
    2:__tether_end) __tether_args=("${@:2}") ;;
    1: | 2:__tether_term) __tether_args=("$@") ;;
  esac
  # After the code ran to its end, `$_` is the eval's argument (the code
  # itself), not the code's last argument; only an exit from inside the
  # code (the EXIT trap) sees the code's own.
  [[ $__tether_us != "$__tether_pre$__tether_code" ]] || __tether_us=
  builtin trap - EXIT
  # BASHOPTS is rebuilt by `shopt` only: bash turns dotglob off when
  # GLOBIGNORE is unset without it, so it is rebuilt first. nocasematch
  # would make the patterns below match `uid` for UID (a user's variable
  # dropped as the shell's), so it goes once the options are noted.
  shopt -q dotglob && shopt -s dotglob || shopt -u dotglob
  __tether_so=$SHELLOPTS __tether_bo=$BASHOPTS
  set +euvx
  shopt -u nocasematch
  builtin trap -p >| "$__tether_cell/shell.new" || return
  builtin trap '' TERM
  __tether_user_vars vars
  __tether_declared decl
  declare -F >| "$__tether_cell/scratch.fns"
  mapfile -t __tether_fns < "$__tether_cell/scratch.fns"
  __tether_fnames=() __tether_fx=() __tether_fr=()
  for __tether_n in "${__tether_fns[@]}"; do
    case ${__tether_n##* } in __tether_* | trap) continue ;; esac
    __tether_fnames+=("${__tether_n##* }")
    [[ $__tether_n != 'declare -f'*x' '* ]] || __tether_fx+=("${__tether_n##* }")
    [[ $__tether_n != 'declare -f'*r*' '* ]] || __tether_fr+=("${__tether_n##* }")
  done
  {
    printf '%s\n' __tether_unset_all
    ((${#__tether_names[@]} == 0)) || declare -p -- "${__tether_names[@]}"
    # The working directory is the shell's own (the directory stack's top
    # is, also where $PWD was assigned or unset or the directory removed:
    # bash's `pwd` still prints it); OLDPWD and PWD, which the `cd` sets,
    # then as the user left them (exported, assigned, unset).
    printf '__tether_cd %q\nunset -v OLDPWD PWD\n' "${DIRSTACK[0]:-$PWD}"
    declare -p OLDPWD PWD 2>/dev/null
    if ((${#DIRSTACK[@]} > 1)); then
      printf '__tether_dirs'
      printf ' %q' "${DIRSTACK[@]:1}"
      printf '\n'
    fi
    ((${#__tether_fnames[@]} == 0)) || declare -f -- "${__tether_fnames[@]}"
    ((${#__tether_fx[@]} == 0)) || printf 'declare -fx -- %q\n' "${__tether_fx[@]}"
    ((${#__tether_fr[@]} == 0)) || printf 'readonly -f -- %q\n' "${__tether_fr[@]}"
    [[ -z $__tether_exit_trap_set ]] || printf '__tether_exit_trap=%q __tether_exit_trap_set=1\n' "$__tether_exit_trap"
    [[ -z $__tether_err_trap_set ]] || printf '__tether_err_trap=%q __tether_err_trap_set=1\n' "$__tether_err_trap"
    umask -p
    # aliases after the functions: they would expand in the restored bodies
    alias -p
    printf '__tether_last=%s __tether_us=%q\n' "$__tether_last" "$__tether_us"
    if ((${#__tether_args[@]} != 0)); then
      printf '__tether_args=('
      printf ' %q' "${__tether_args[@]}"
      printf ')\nset -- "${__tether_args[@]}"\n'
    fi
    printf '__tether_opts %q %q\n#tether-end\n' "$__tether_so" "$__tether_bo"
  } >> "$__tether_cell/shell.new"
}

# The code reached its end with status $1; the positional parameters
# it left follow.
__tether_end() {
  __tether_save "$@"
  printf '%s\n' "$1" >| "$__tether_cell/end"
}
