#!/usr/bin/env bash
# A queue of experiment rows run in the background (one torch thread by default), resumable across sittings and
# machines:
#
#   setsid nohup bash benchmarks/experiment_queue.sh examples/configs/table1-multi30k.toml ~/runs/table1-multi30k \
#       hard-sample relaxed > /dev/null 2>&1 < /dev/null &
#
# It runs `pyro-attention experiment run --config CONFIG --out RUNS --rows ROW --threads N --quiet` for each ROW in
# turn from a frozen copy of the package at this checkout's HEAD (~/runs/src-COMMIT, ~/runs/venv-COMMIT: editing
# the checkout does not change a running row) and logs to RUNS.log.  What is missing is rebuilt: on a new machine
# or commit the venv (torch==2.13.0 first, then the package); a finished row is skipped and a half-trained one
# resumes from its last.pt (the runner's own rules).  SIGTERM to a row's process (`pkill -f 'experiment
# --config'`) writes its last.pt and stops the queue.  PYRO_ATTENTION_RUNS (default ~/runs) moves the copies;
# PYRO_ATTENTION_EXE names a pyro-attention command to use instead of building one; PYRO_ATTENTION_THREADS (default
# 1) gives the rows more threads, e.g. 2 for the last row left on a 2-core machine (a row resumed at another thread
# count goes on from its checkpoint but sums in another order: not bit-identical to an uninterrupted run);
# PYRO_ATTENTION_MATMUL_PRECISION (highest, high or medium; default: the file's) sets the rows' training products'
# `--matmul-precision` (medium: bfloat16 products, faster on a CPU with AMX; evaluation keeps float32).
set -euo pipefail

# the whole queue is one function, read before it runs: editing this file while a queue runs cannot change it
main() {
    if [ $# -lt 3 ]; then
        echo "usage: $0 CONFIG RUNS ROW [ROW ...]" >&2
        exit 2
    fi
    cd "$(dirname "$0")/.."
    config=$(realpath "$1")
    out=$2
    shift 2
    threads=${PYRO_ATTENTION_THREADS:-1}
    if ! [[ "$threads" =~ ^[1-9][0-9]*$ ]]; then
        echo "$0: PYRO_ATTENTION_THREADS must be a whole number >= 1, got '$threads'" >&2
        exit 2
    fi
    precision=${PYRO_ATTENTION_MATMUL_PRECISION:-}
    if [ -n "$precision" ] && ! [[ "$precision" =~ ^(highest|high|medium)$ ]]; then
        echo "$0: PYRO_ATTENTION_MATMUL_PRECISION must be highest, high or medium, got '$precision'" >&2
        exit 2
    fi
    base=${PYRO_ATTENTION_RUNS:-$HOME/runs}
    log="$out.log"
    mkdir -p "$base" "$(dirname "$out")"
    commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    venv="$base/venv-$commit"  # one per commit: a rebuilt package never changes a queue that is still running
    exe=${PYRO_ATTENTION_EXE:-$venv/bin/pyro-attention}  # PYRO_ATTENTION_EXE: a command to use instead (tests)
    if [ -z "${PYRO_ATTENTION_EXE:-}" ]; then
        # two queues started together on a new commit share one build: the second waits for the first's lock
        # (without it, it removed the venv the first was installing); .built marks a build that completed
        exec 9> "$base/venv-$commit.lock"
        flock 9
        if [ ! -f "$venv/.built" ]; then
            echo "$(date -u +%FT%TZ) building $venv from $commit" >> "$log"
            rm -rf "$base/src-$commit" "$venv" && mkdir -p "$base/src-$commit"
            git archive HEAD | tar -x -C "$base/src-$commit"
            python3 -m venv --system-site-packages "$venv"
            "$venv/bin/python" -c "import torch" 2>/dev/null || "$venv/bin/pip" install -q torch==2.13.0
            "$venv/bin/pip" install -q "$base/src-$commit" >> "$log" 2>&1
            touch "$venv/.built"
        fi
        flock -u 9
        exec 9>&-
    fi
    for row in "$@"; do
        echo "$(date -u +%FT%TZ) row $row ($commit, threads $threads${precision:+, matmul precision $precision})" >> "$log"
        status=0
        "$exe" experiment run --config "$config" --out "$out" --rows "$row" --threads "$threads" --quiet \
            ${precision:+--matmul-precision "$precision"} \
            >> "$log" 2>&1 || status=$?
        if [ "$status" -eq 130 ]; then  # SIGINT / SIGTERM: last.pt written; the queue stops with its row
            echo "$(date -u +%FT%TZ) row $row interrupted; queue stopped (run the same command to continue)" >> "$log"
            exit 130
        elif [ "$status" -ne 0 ]; then
            echo "$(date -u +%FT%TZ) row $row exited with $status" >> "$log"
        fi
    done
    echo "$(date -u +%FT%TZ) queue done" >> "$log"
}

main "$@"
exit
