# tether's cell wrapper for bash: the functions the one-line cell script
# (core/src/agent/shell.rs) calls around the user's code. Every name is
# __tether_*, except the `trap` function that keeps a user's EXIT trap
# away from the real one. @MARKER@ is filled in by shell.rs.
#
# A user's function may have the name of any builtin (bash finds functions
# first: `cd() { builtin cd "$@" && ls; }`, Oils' `builtin() { …; }`).
# What runs once a user's functions are defined (the end of the restore,
# the `trap` function, the save) reaches every builtin through `builtin`,
# and a user's function named `builtin` is out of the way while it runs:
# the restore defines it last (__tether_late, on the code's first line),
# the save sets it aside first (__tether_aside).

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
  builtin shopt -s extglob
  builtin compgen -v -X "$__tether_skip" >| "$__tether_cell/scratch.$1"
  builtin mapfile -t __tether_names < "$__tether_cell/scratch.$1"
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
  builtin declare -p >| "$__tether_cell/scratch.$1"
  builtin mapfile -t __tether_d < "$__tether_cell/scratch.$1"
  for __tether_n in "${__tether_d[@]/*=*/}"; do
    __tether_n=${__tether_n##* }
    [[ -z $__tether_n || $__tether_n == $__tether_skip ]] || __tether_names+=("$__tether_n")
  done
  builtin unset __tether_d
}

# The snapshot holds every variable of the user's: the ones this shell
# inherited go first (so an `unset` persists too).
__tether_unset_all() {
  __tether_user_vars tmp
  ((${#__tether_names[@]} == 0)) || builtin unset -v "${__tether_names[@]}"
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
  builtin local IFS=: __tether_o __tether_on
  __tether_on=()
  for __tether_o in $BASHOPTS; do
    [[ :$2: == *:"$__tether_o":* ]] || builtin shopt -u "$__tether_o"
  done
  for __tether_o in $2; do builtin shopt -s "$__tether_o"; done
  for __tether_o in $SHELLOPTS; do
    [[ :$1: == *:"$__tether_o":* ]] || builtin set +o "$__tether_o"
  done
  for __tether_o in $1; do
    case $__tether_o in
      xtrace) __tether_pre+='set -x;' ;;
      verbose) __tether_pre+='set -v;' ;;
      noexec | onecmd | monitor | history | emacs | vi) ;;
      *) __tether_on+=(-o "$__tether_o") ;;
    esac
  done
  builtin set "${__tether_on[@]}"
} 2>/dev/null

# From here on, whatever ends the shell (exit, set -e, set -u, a cancel's
# TERM) saves the state first.
# Returns the previous cell's status, so the code starts with it as `$?`.
__tether_arm() {
  if [[ -n ${__tether_cd_note-} ]]; then
    builtin printf '%s' "$__tether_cd_note" >&2
    builtin unset __tether_cd_note
  fi
  builtin trap '{ __tether_save "$@"; } 2>/dev/null' EXIT
  # The user's ERR trap is set at the start of the code's own eval, on its
  # first line (so `$LINENO` stays the code's), as in the cell that set
  # it: set before the eval, bash would also run it for the eval itself
  # when the code's last command fails. A user's function named `builtin`
  # is defined there too, after it. The code and this prefix leave the
  # shell's variables first (a `set | grep` of the code's words would find
  # them). `$?` and `$_` are then the previous cell's again (a failing
  # command that is not the last of an && list fires no ERR trap and
  # stops no `set -e`).
  builtin local __tether_p='builtin unset -v __tether_code __tether_pre; '
  [[ -z $__tether_err_trap_set ]] || __tether_p+="builtin trap -- ${__tether_err_trap@Q} ERR; "
  [[ -z ${__tether_late+set} ]] || __tether_p+='__tether_late; '
  __tether_pre="${__tether_p}__tether_st && __tether_same ${1@Q}; $__tether_pre"
  builtin unset __tether_snap
  builtin return "${__tether_last:-0}"
}

# The user's function named `builtin`, as the save set it aside (its
# definition in __tether_late, __tether_late_x if exported): the last
# thing the wrapper defines. (`export` is the only builtin the wrapper
# calls after it: bash has no other way to export a function.)
__tether_late() {
  builtin set -- "$__tether_late" "${__tether_late_x-}"
  builtin unset __tether_late __tether_late_x
  builtin eval -- "$1"
  [[ -z $2 ]] || export -f builtin
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
  builtin local __tether_s __tether_act __tether_rest __tether_print=
  __tether_rest=()
  case ${1-} in
    -l) builtin trap "$@"; builtin return ;;
    -p) __tether_print=1; builtin shift ;;
    --) builtin shift ;;
  esac
  if [[ -n $__tether_print ]] || (($# == 0)); then
    # every signal by number (not {1..64}: the user may have turned off
    # brace expansion), in bash's order
    (($# != 0)) || builtin set -- EXIT 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64 DEBUG ERR RETURN
    for __tether_s; do
      if __tether_is_exit "$__tether_s" || __tether_is_err "$__tether_s"; then
        # the ones before it first, in the order asked
        ((${#__tether_rest[@]} == 0)) || builtin trap -p "${__tether_rest[@]}"
        __tether_rest=()
        if __tether_is_exit "$__tether_s"; then
          [[ -z $__tether_exit_trap_set ]] || builtin printf 'trap -- %s EXIT\n' "${__tether_exit_trap@Q}"
        else
          [[ -z $__tether_err_trap_set ]] || builtin printf 'trap -- %s ERR\n' "${__tether_err_trap@Q}"
        fi
      elif ! __tether_is_term "$__tether_s" || [[ -z $__tether_term_ours ]]; then
        __tether_rest+=("$__tether_s")
      fi
    done
    ((${#__tether_rest[@]} == 0)) || builtin trap -p "${__tether_rest[@]}"
    builtin return
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
    builtin shift
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

# Runs with POSIXLY_CORRECT in its temporary environment: in POSIX mode
# the special builtins (trap, set, export, unset) are found before
# functions, whatever the user defined. Ends tether's EXIT trap and the
# user's `set -euvx` (noted before), lists the exported functions into
# scratch file fns, then sets aside a user's function named `builtin`:
# its definition goes to scratch file fn, listed by the first of
# `declare`, `typeset` and `command declare` that is not a function
# itself (`export -f` fails for a name that is none, and exports one that
# is: hence the list before), and the function is unset. Fails where it
# cannot (all three are functions too, or it is readonly): the state is
# then not kept.
__tether_aside() {
  trap - EXIT
  set +euvx
  __tether_fn_aside=
  export -pf >| "$__tether_cell/scratch.fns" || return
  export -f builtin 2>/dev/null || return 0
  if ! export -f declare 2>/dev/null; then
    declare -f builtin
  elif ! export -f typeset 2>/dev/null; then
    typeset -f builtin
  elif ! export -f command 2>/dev/null; then
    command declare -f builtin
  else
    return 1
  fi >| "$__tether_cell/scratch.fn" && unset -f builtin && __tether_fn_aside=1
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
  # After the code ran to its end, `$_` is the eval's argument (the code
  # itself), not the code's last argument; only an exit from inside the
  # code (the EXIT trap) sees the code's own.
  case ${#FUNCNAME[@]}:${FUNCNAME[1]-} in
    2:__tether_end) __tether_args=("${@:2}") __tether_us= ;;
    1: | 2:__tether_term) __tether_args=("$@") ;;
  esac
  # The options as the user left them, before the aside (bash before 5.1
  # turns expand_aliases off as it leaves POSIX mode).
  __tether_so=$SHELLOPTS __tether_bo=:$BASHOPTS:
  POSIXLY_CORRECT=1 __tether_aside || { __tether_no_aside=1 && return 1; }
  # BASHOPTS is rebuilt by `shopt` only: bash turns dotglob off when
  # GLOBIGNORE is unset without it, so dotglob is as `shopt` says.
  # nocasematch would make the patterns below match `uid` for UID (a
  # user's variable dropped as the shell's), so it goes once the options
  # are noted.
  __tether_bo=${__tether_bo/:dotglob:/:}
  ! builtin shopt -q dotglob || __tether_bo+=dotglob:
  __tether_bo=${__tether_bo#:} __tether_bo=${__tether_bo%:}
  builtin shopt -u nocasematch
  builtin trap -p >| "$__tether_cell/shell.new" || return
  builtin trap '' TERM
  __tether_user_vars vars
  __tether_declared decl
  # The functions: `export -f NAME` lines (the aside's list) name the
  # exported ones, `declare -f[r] NAME` lines all (a user's `builtin` set
  # aside is none of them now).
  builtin declare -F >> "$__tether_cell/scratch.fns"
  builtin mapfile -t __tether_fns < "$__tether_cell/scratch.fns"
  __tether_fnames=() __tether_fx=() __tether_fr=() __tether_late_x=
  for __tether_n in "${__tether_fns[@]}"; do
    case ${__tether_n##* } in __tether_* | trap) continue ;; esac
    case $__tether_n in
      'export -f builtin') __tether_late_x=1 ;;
      'export -f '*) __tether_fx+=("${__tether_n##* }") ;;
      *)
        __tether_fnames+=("${__tether_n##* }")
        [[ $__tether_n != 'declare -f'*r*' '* ]] || __tether_fr+=("${__tether_n##* }")
        ;;
    esac
  done
  __tether_fn=
  [[ -z $__tether_fn_aside ]] || IFS= builtin read -r -d '' __tether_fn < "$__tether_cell/scratch.fn"
  {
    builtin printf '%s\n' __tether_unset_all
    ((${#__tether_names[@]} == 0)) || builtin declare -p -- "${__tether_names[@]}"
    # The working directory is the shell's own (the directory stack's top
    # is, also where $PWD was assigned or unset or the directory removed:
    # bash's `pwd` still prints it); OLDPWD and PWD, which the `cd` sets,
    # then as the user left them (exported, assigned, unset).
    builtin printf '__tether_cd %q\nunset -v OLDPWD PWD\n' "${DIRSTACK[0]:-$PWD}"
    builtin declare -p OLDPWD PWD 2>/dev/null
    if ((${#DIRSTACK[@]} > 1)); then
      builtin printf '__tether_dirs'
      builtin printf ' %q' "${DIRSTACK[@]:1}"
      builtin printf '\n'
    fi
    builtin umask -p
    # Aliases, then the functions, with alias expansion off: a function's
    # body is kept as bash parsed it, the aliases of its time expanded, and
    # no alias must expand in it again. The user's functions are defined
    # from here on: `\builtin` (an alias of that name neither).
    builtin printf 'shopt -u expand_aliases\n'
    builtin alias -p
    ((${#__tether_fnames[@]} == 0)) || builtin declare -f -- "${__tether_fnames[@]}"
    builtin printf '\\builtin shopt -s expand_aliases\n'
    ((${#__tether_fx[@]} == 0)) || builtin printf '\\builtin declare -fx -- %q\n' "${__tether_fx[@]}"
    ((${#__tether_fr[@]} == 0)) || builtin printf '\\builtin readonly -f -- %q\n' "${__tether_fr[@]}"
    [[ -z $__tether_fn_aside ]] || builtin printf '__tether_late=%q __tether_late_x=%s\n' "$__tether_fn" "$__tether_late_x"
    [[ -z $__tether_exit_trap_set ]] || builtin printf '__tether_exit_trap=%q __tether_exit_trap_set=1\n' "$__tether_exit_trap"
    [[ -z $__tether_err_trap_set ]] || builtin printf '__tether_err_trap=%q __tether_err_trap_set=1\n' "$__tether_err_trap"
    builtin printf '__tether_last=%s __tether_us=%q\n' "$__tether_last" "$__tether_us"
    if ((${#__tether_args[@]} != 0)); then
      builtin printf '__tether_args=('
      builtin printf ' %q' "${__tether_args[@]}"
      builtin printf ')\n\\builtin set -- "${__tether_args[@]}"\n'
    fi
    # SHELLOPTS and BASHOPTS are the shell's (their values are the
    # options'); exported, they carry the options to child shells
    # (`export SHELLOPTS` then `set -x` traces a `bash -c` too)
    for __tether_n in SHELLOPTS BASHOPTS; do
      if [[ ${!__tether_n@a} == *x* ]]; then
        builtin printf '\\builtin export %s\n' "$__tether_n"
      else
        builtin printf '\\builtin export -n %s\n' "$__tether_n"
      fi
    done
    builtin printf '__tether_opts %q %q\n#tether-end\n' "$__tether_so" "$__tether_bo"
  } >> "$__tether_cell/shell.new"
}

# The code reached its end with status $1; the positional parameters
# it left follow. (No `end` where the aside failed: `builtin` is still
# the user's.)
__tether_end() {
  __tether_save "$@"
  [[ -n ${__tether_no_aside-} ]] || builtin printf '%s\n' "$1" >| "$__tether_cell/end"
}
