#!/usr/bin/env bash
# samebehaviour.sh: do two trajflow binaries write the same output?
#
#   bench/samebehaviour.sh BASE NEW [WORKDIR]
#
# BASE and NEW are trajflow binaries (say, built from a commit before a
# refactor and from one after it):
#
#   (cd /tmp/base-tree && go build -o /tmp/fig/base/trajflow ./cmd/trajflow)
#   go build -o /tmp/fig/new/trajflow ./cmd/trajflow
#   bench/samebehaviour.sh /tmp/fig/base/trajflow /tmp/fig/new/trajflow
#
# Each binary runs the same cases, on the built-in simulator, from the
# repository root (the configs and tasks of this checkout for both):
# the quick start as it is and with output.steps, output.jsonl and
# output.arrow_stream, and the sim-agent, tools, nemo-gym, nemo-rl, grid,
# guess and vlm examples with output.steps and output.jsonl. nemo-gym
# needs python3 (its quiz rows go to examples/python-env/env.py); without
# it the case is skipped, and said so. The examples needing an engine or
# Node (agents, serve, kubernetes) are not run.
#
# Both binaries write each case into the same path, WORKDIR/run/CASE (run
# ids and configs name the output directory), which is then moved to
# WORKDIR/base/CASE or WORKDIR/new/CASE. WORKDIR defaults to a new
# temporary directory and is left for inspection.
#
# The two trees are then compared file by file:
#   - the same relative paths and permission bits, leaving out
#     .trajflow.key (a random secret each run) and .trajflow.lock (the pid);
#   - every Parquet file and the Arrow IPC stream read back with Arrow's own
#     readers (bench/samebehaviour, not the writer trajflow uses): key-value
#     metadata, schema, and rows sorted, floats to 9 digits, the timing
#     columns gen_ms, env_ms and total_ms blanked;
#   - every .json and .jsonl file as text, with the value of each
#     created_at key (a JSONL line's start, Unix seconds) set to 0, numbers
#     with a fraction or an exponent to 9 digits (metrics.json's means and
#     standard deviations sum the rows in the order they finished in, which
#     moves their last bits), and a .jsonl file's lines sorted (their order
#     is the order rollouts finished in, as a Parquet file's rows);
#   - any other file byte for byte (images);
#   - each run's exit status.
# Those are all the rules: see timingColumns and timingKeys in
# bench/samebehaviour/main.go. Run it with the same binary twice to see
# that nothing else varies from run to run.
#
# Across a change meant to add columns (a new schema version), name them,
# and the metadata keys that say so, in SAMEBEHAVIOUR_SKIP to compare the
# rest; each printed table says what it left out:
#
#   SAMEBEHAVIOUR_SKIP=segments,routed_experts,trajflow.schema_version \
#     bench/samebehaviour.sh BASE NEW
#
# It prints every difference (the start of a unified diff of the printed
# forms, long lines cut; the whole diff in WORKDIR/diffs/) and
# exits 1 when there is one, 0 when the trees are the same, 2 on bad usage.

set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
	sed -n '2,/^$/s/^# \{0,1\}//p' "$0" >&2
	exit 2
fi

for b in "$1" "$2"; do
	[[ -f $b && -x $b ]] || {
		echo "samebehaviour: $b is not an executable" >&2
		exit 2
	}
done
abs() { (cd "$(dirname "$1")" && echo "$PWD/$(basename "$1")"); }
base_bin=$(abs "$1")
new_bin=$(abs "$2")
work=${3:-$(mktemp -d /tmp/samebehaviour.XXXXXX)}
mkdir -p "$work"
work=$(abs "$work")

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

dump="$work/samebehaviour-dump"
go build -o "$dump" ./bench/samebehaviour

# name|config|--set overrides (space separated; none contains a space)
with="--set output.steps=true --set output.jsonl=true"
cases=(
	"quickstart|examples/quickstart/config.yaml|"
	"quickstart-all|examples/quickstart/config.yaml|$with --set output.arrow_stream=@RUN@/stream.arrow"
	"sim-agent|examples/sim-agent/config.yaml|$with"
	"tools|examples/tools/config.yaml|$with"
	"nemo-gym|examples/nemo-gym/config.yaml|$with"
	"nemo-rl|examples/nemo-rl/config.yaml|$with"
	"grid|examples/grid/config.yaml|$with"
	"guess|examples/guess/config.yaml|$with"
	"vlm|examples/vlm/config.yaml|$with"
)

skipped=()
run_case() { # side binary name config sets
	local side=$1 bin=$2 name=$3 config=$4 sets=$5
	local out="$work/run/$name"
	rm -rf "$out" "${work:?}/$side/$name"
	mkdir -p "$work/run" "$work/$side"
	sets=${sets//@RUN@/$out}
	local rc=0
	# shellcheck disable=SC2086 # the overrides are split on purpose
	"$bin" run "$config" --quiet --set "output.dir=$out" $sets \
		>"$work/$side/$name.log" 2>&1 || rc=$?
	echo "$rc" >"$work/$side/$name.rc"
	mv "$out" "$work/$side/$name"
	echo "  $side $name: exit $rc"
}

for c in "${cases[@]}"; do
	IFS='|' read -r name config sets <<<"$c"
	if [[ $name == nemo-gym ]] && ! command -v python3 >/dev/null; then
		skipped+=("$name (needs python3)")
		continue
	fi
	for side in base new; do
		bin=$base_bin
		[[ $side == new ]] && bin=$new_bin
		run_case "$side" "$bin" "$name" "$config" "$sets"
	done
done

# printed FILE: the form of FILE that is compared.
printed() {
	case $1 in
	*.parquet | *.arrow) "$dump" table "$1" ;;
	*.jsonl) "$dump" json "$1" | LC_ALL=C sort ;;
	*.json) "$dump" json "$1" ;;
	*) cat "$1" ;;
	esac
}

diffs=0
differ() {
	echo "DIFF $*"
	diffs=$((diffs + 1))
}

files() { # the files of a tree, relative, with their permission bits
	(cd "$1" && find . -type f ! -name .trajflow.key ! -name .trajflow.lock \
		-printf '%P %m\n' | LC_ALL=C sort)
}

compared=0
for c in "${cases[@]}"; do
	IFS='|' read -r name _ _ <<<"$c"
	[[ -d $work/base/$name ]] || continue
	b="$work/base/$name" n="$work/new/$name"
	if ! cmp -s "$work/base/$name.rc" "$work/new/$name.rc"; then
		differ "$name: exit status $(cat "$work/base/$name.rc") (base) against $(cat "$work/new/$name.rc") (new); logs in $work/{base,new}/$name.log"
	fi
	if ! d=$(diff <(files "$b") <(files "$n")); then
		differ "$name: files or permissions (< base, > new):"
		echo "$d"
	fi
	while read -r f _; do
		[[ -f $n/$f ]] || continue
		compared=$((compared + 1))
		if ! d=$(diff -u --label "base/$name/$f" --label "new/$name/$f" \
			<(printed "$b/$f") <(printed "$n/$f")); then
			differ "$name/$f (whole diff in $work/diffs/$name/$f.diff):"
			mkdir -p "$(dirname "$work/diffs/$name/$f")"
			echo "$d" >"$work/diffs/$name/$f.diff"
			head -n 40 <<<"$d" | cut -c1-400
		fi
	done < <(files "$b")
done

for s in "${skipped[@]+"${skipped[@]}"}"; do
	echo "skipped: $s"
done
echo "compared $compared files in $work; $diffs difference(s)"
[[ $diffs -eq 0 ]]
