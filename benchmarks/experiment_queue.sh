#!/usr/bin/env bash
# A queue of experiment rows run in the background, one torch thread, resumable across sittings and machines:
#
#   setsid nohup bash benchmarks/experiment_queue.sh examples/configs/table1-multi30k.toml ~/runs/table1-multi30k \
#       hard-sample relaxed > /dev/null 2>&1 < /dev/null &
#
# It runs `pyro-attention experiment --config CONFIG --out RUNS --rows ROW --threads 1 --quiet` for each ROW in
# turn from a frozen copy of the package (~/runs/src, ~/runs/venv: editing the checkout does not change a running
# row), and logs to RUNS.log.  What is missing is rebuilt: on a new machine the venv (torch==2.13.0 first, then
# the package from this checkout's HEAD); a finished row is skipped and a half-trained one resumes from its
# last.pt (the runner's own rules).  PYRO_ATTENTION_RUNS (default ~/runs) moves the venv and source copy.
set -euo pipefail
if [ $# -lt 3 ]; then
    echo "usage: $0 CONFIG RUNS ROW [ROW ...]" >&2
    exit 2
fi
cd "$(dirname "$0")/.."
config=$(realpath "$1")
out=$2
shift 2
base=${PYRO_ATTENTION_RUNS:-$HOME/runs}
log="$out.log"
mkdir -p "$base" "$(dirname "$out")"
if [ ! -x "$base/venv/bin/pyro-attention" ]; then
    echo "$(date -u +%FT%TZ) building $base/venv from $(git rev-parse --short HEAD)" >> "$log"
    rm -rf "$base/src" && mkdir -p "$base/src"
    git archive HEAD | tar -x -C "$base/src"
    python3 -m venv --system-site-packages "$base/venv"
    "$base/venv/bin/python" -c "import torch" 2>/dev/null || "$base/venv/bin/pip" install -q torch==2.13.0
    "$base/venv/bin/pip" install -q "$base/src" >> "$log" 2>&1
fi
for row in "$@"; do
    echo "$(date -u +%FT%TZ) row $row" >> "$log"
    "$base/venv/bin/pyro-attention" experiment --config "$config" --out "$out" --rows "$row" --threads 1 --quiet \
        >> "$log" 2>&1 || echo "$(date -u +%FT%TZ) row $row exited with $?" >> "$log"
done
echo "$(date -u +%FT%TZ) queue done" >> "$log"
