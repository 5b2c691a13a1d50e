# shellcheck shell=sh
# Step times for `make test` (sourced by its recipe; POSIX sh). Each step runs
# in turn; its wall time and result go to a file, one line each
# (name<TAB>seconds<TAB>result), and when the shell exits (the steps done, a
# step failed, or Ctrl-C) they are printed as a table, as far as it got.
# A line says when each step starts ("make test: NAME ...") and when it ends
# ("make test: NAME: passed in 1 min 4 s"); steps_prefix changes "make test".
#
#   . tools/steptimes.sh; steps_begin FILE
#   step NAME COMMAND...          runs COMMAND in this shell (a builtin such as wait too);
#                                 returns its status
#   step -C DIR NAME COMMAND...   the same, in DIR (in a subshell)
#   step_skipped NAME WHY         a step not run
#   steps_on_exit COMMAND         runs COMMAND at exit, before the table (cleanup)

steps_tab=$(printf '\t')
steps_prefix=${steps_prefix:-make test}

steps_begin() {
	steps_file=$1
	steps_start=$(date +%s)
	steps_current=
	steps_cleanup=:
	mkdir -p "$(dirname "$steps_file")"
	: >"$steps_file"
	trap steps_end EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

steps_on_exit() {
	steps_cleanup="$steps_cleanup; $1"
}

step() {
	steps_dir=
	if [ "$1" = -C ]; then
		steps_dir=$2
		shift 2
	fi
	steps_current=$1
	shift
	steps_t0=$(date +%s)
	echo "$steps_prefix: $steps_current ..."
	if [ -n "$steps_dir" ]; then
		echo "+ cd $steps_dir && $*"
		if (cd "$steps_dir" && "$@"); then steps_st=0; else steps_st=$?; fi
	else
		echo "+ $*"
		if "$@"; then steps_st=0; else steps_st=$?; fi
	fi
	steps_secs=$(($(date +%s) - steps_t0))
	steps_record "$steps_current" "$steps_secs" "$(steps_result "$steps_st")"
	echo "$steps_prefix: $steps_current: $(steps_result "$steps_st") in $(steps_duration "$steps_secs")"
	steps_current=
	return "$steps_st"
}

step_skipped() {
	steps_record "$1" - "$2"
}

steps_record() {
	printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$steps_file"
}

steps_result() {
	if [ "$1" = 0 ]; then echo passed; else echo "failed (exit $1)"; fi
}

# 754 s: 12 min 34 s; a step not run: -.
steps_duration() {
	case $1 in
	-) echo - ;;
	*) echo "$(($1 / 60)) min $(($1 % 60)) s" ;;
	esac
}

steps_end() {
	steps_exit=$?
	set +e
	trap - EXIT INT TERM
	if [ -n "$steps_current" ]; then
		steps_record "$steps_current" "$(($(date +%s) - steps_t0))" interrupted
	fi
	eval "$steps_cleanup"
	echo
	echo "$steps_prefix: time of each step"
	echo
	echo "| step | time | result |"
	echo "| --- | --- | --- |"
	while IFS=$steps_tab read -r name secs result; do
		echo "| $name | $(steps_duration "$secs") | $result |"
	done <"$steps_file"
	echo "| total | $(steps_duration "$(($(date +%s) - steps_start))") | $(steps_result "$steps_exit") |"
	exit "$steps_exit"
}
