# Sourced by scripts/bench and scripts/device/scale.sh: time to the dashboard's first frame,
# without a terminal (script_frame) and on a pseudo-terminal (tty_frame). Needs $bin (ddptop), $tmp (a scratch directory), $py (DDPTOP_PYTHON, may be
# empty) and ms() (milliseconds since a `date +%s%N` stamp).
# Time to first frame without a terminal: the dashboard (--script, 120x40 in memory) writes its
# first screen to a file; from exec until that file has content, a fresh data directory each
# time. `script_frame NAME TRIES [FLAGS...]` prints the best of TRIES in ms; fails when no
# screen was written.
script_frame() {
    local name=$1 tries=$2 best=999999 i f t v pid
    shift 2
    for i in $(seq "$tries"); do
        f="$tmp/$name$i.txt"
        t=$(date +%s%N)
        DDPTOP_PYTHON="$py" "$bin" --data-dir "$tmp/$name.data$i" "$@" --script "dump:$f" >/dev/null 2>&1 &
        pid=$!
        while [ ! -s "$f" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.002; done
        v=$(ms "$t")
        wait "$pid" || true
        [ -s "$f" ] || { echo "no first frame written ($name)" >&2; return 1; }
        (( v < best )) && best=$v
    done
    echo "$best"
}

# Time to first frame on a terminal: the dashboard under `script` (a pseudo-terminal of 120x40),
# from its exec until the frame's text ("ddptop", the border's title; the log's first line is
# script's own header) is on the terminal; then it is hung up. The dashboard draws its first
# frame before the backend is known (ui/splash.rs), so this is what a user waits in each mode.
tty_frame() {
    local best=999999 i f v pid
    for i in 1 2 3; do
        f="$tmp/tty.$1.$i"
        : >"$f"
        mkfifo "$f.in"
        # The clock starts in the terminal's shell just before it execs ddptop (starting
        # `script`, the shell and `stty` is not ddptop's time).
        DDPTOP_PYTHON="$py" script -qfec \
            "stty rows 40 cols 120; date +%s%N >$f.t0; exec $bin --data-dir $tmp/tdata.$1.$i --config $tmp/none.toml ${2:-}" \
            "$f" <"$f.in" >/dev/null 2>&1 &
        pid=$!
        # script's input stays open (fd 3; no end-of-file hangs the dashboard up early), and
        # fd 4 on the same fifo makes `read -t` a sleep without starting a process: on a busy
        # machine a loop of `sleep`/`grep` processes polls far coarser than 2 ms.
        exec 3<>"$f.in" 4<>"$f.in"
        local seen="" buf
        while [[ -z $seen ]] && kill -0 "$pid" 2>/dev/null; do
            IFS= read -r -d '' buf <"$f" || true
            [[ $buf == *$'\n'*ddptop* ]] && seen=1 || read -r -t 0.002 -u 4 _ || true
        done
        v=$(ms "$(cat "$f.t0")")
        [[ -n $seen ]] || { echo "no first frame on the terminal (${2:-auto})" >&2; exit 1; }
        kill "$pid" 2>/dev/null || true
        exec 3>&- 4<&-
        wait "$pid" 2>/dev/null || true
        (( v < best )) && best=$v
    done
    echo "$best"
}
