#!/usr/bin/env bash
# One sitting of experiment rows on a lent machine that will not come back (a GPU lent for minutes): every row in
# its own process at once, trained until TRAIN_END seconds, then -- a row still training gets SIGTERM (last.pt
# written) -- each paused row's best.pt evaluated as it is (`experiment run --evaluate-paused`, result-paused.json,
# "finished": false) while rows that stopped early finish their own evaluation, until EVAL_END seconds.  What is
# small (histories, results, decodings; no *.pt) comes back as OUT/runs.tgz, with OUT/log.txt.
#
#   bash benchmarks/gpu_sitting.sh cuda /tmp/runs \
#       examples/configs/table1-multi30k.toml:marginal,hard-enum,va-enum \
#       examples/configs/table1-iwslt14.toml:marginal,hard-enum,va-enum,va-sample,hard-sample
#
# The rows of CONFIG go to RUNS/<CONFIG's name>/<label>.  Settings, all optional:
#   TRAIN_END, EVAL_END  seconds from the start (default 420, 570: a 10-minute call)
#   DATA_DIR             replaces every config's data_dir (the data copied beside the checkout)
#   WHEELS               a folder of wheels installed first into /tmp/site (packages the machine lacks)
#   SMOKE                a config trained and evaluated whole beside the rows (tiny: catches a device's bugs early)
#   OUT                  where runs.tgz and log.txt go (default RUNS);  PY  the python (default python3)
# Relative paths (RUNS, CONFIG, data_dir) are read from the current folder, as `experiment` reads them.
# Without an installed pyro_attention the package runs from this checkout (copied to /tmp/pyro-attention-pkg with
# models/ and inference/ where an install puts them).  With CUDA, an MPS daemon is started when there is one, so
# the rows' kernels share the GPU instead of taking turns.
set -u

main() {
    if [ $# -lt 3 ]; then
        echo "usage: $0 DEVICE RUNS CONFIG:ROW[,ROW...] [CONFIG:ROW[,ROW...] ...]" >&2
        exit 2
    fi
    local dev=$1 runs=$2
    shift 2
    local t0 repo
    t0=$(date +%s)
    repo=$(cd "$(dirname "$0")/.." && pwd)
    mkdir -p "$runs"
    runs=$(cd "$runs" && pwd)
    local out=${OUT:-$runs} py=${PY:-python3} train_end=${TRAIN_END:-420} eval_end=${EVAL_END:-570}
    mkdir -p "$out"
    local log=$out/log.txt
    say() { echo "$(( $(date +%s) - t0 ))s $*" | tee -a "$log"; }
    export PYTHONSAFEPATH=1  # python -m in the checkout: its pyro_attention/ (no models/, inference/) not first
    if [ -n "${WHEELS:-}" ]; then
        $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            "$WHEELS"/*.whl || exit 1
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    fi
    if ! $py -c "import pyro_attention.inference" 2> /dev/null; then
        local pkg=/tmp/pyro-attention-pkg
        rm -rf "$pkg" && mkdir -p "$pkg" && cp -r "$repo/pyro_attention" "$pkg/" \
            && cp -r "$repo/models" "$pkg/pyro_attention/models" \
            && cp -r "$repo/inference" "$pkg/pyro_attention/inference" || exit 1
        export PYTHONPATH=$pkg${PYTHONPATH:+:$PYTHONPATH}
    fi
    export PYTHONUNBUFFERED=1
    $py -c "import torch, pyro, pyro_attention.inference; print('torch', torch.__version__, 'pyro', pyro.__version__,
            'cuda', torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else '')" \
        >> "$log" 2>&1 || { cat "$log"; exit 1; }
    case $dev in cuda*) start_mps ;; esac

    declare -A pids configs
    local spec config rows row name
    for spec in "$@"; do
        config=${spec%:*}
        rows=${spec##*:}
        [ -f "$config" ] || config=$repo/$config
        [ -f "$config" ] || { say "no experiment file $config"; exit 2; }
        name=$(basename "$config" .toml)
        name=${name%.json}
        config=$(with_data_dir "$config" "$name")
        mkdir -p "$runs/$name"
        for row in ${rows//,/ }; do
            configs[$name/$row]=$config
            experiment "$config" "$runs/$name" "$runs/$name-$row.log" --rows "$row"
            pids[$name/$row]=$!
        done
    done
    local smoke=
    if [ -n "${SMOKE:-}" ]; then
        [ -f "$SMOKE" ] || SMOKE=$repo/$SMOKE
        experiment "$(with_data_dir "$SMOKE" smoke)" "$runs/smoke" "$runs/smoke.log"
        smoke=$!
    fi
    say "started ${!pids[*]}"

    until_all_done "$train_end"
    if [ -n "$smoke" ]; then  # it has had the rows' training time: what it has not done by now is not waited for
        kill -0 "$smoke" 2> /dev/null && { kill -KILL "$smoke"; say "smoke test stopped: not done by TRAIN_END"; }
        wait "$smoke"
        say "smoke test exited with $?"
    fi
    local key
    for key in "${!pids[@]}"; do  # still training: SIGTERM (last.pt written); evaluating after early stopping: on
        if kill -0 "${pids[$key]}" 2> /dev/null && [ ! -f "$runs/$key/trained.json" ]; then
            kill -TERM "${pids[$key]}"
            say "SIGTERM $key"
        fi
    done
    for key in "${!pids[@]}"; do
        if [ ! -f "$runs/$key/trained.json" ]; then
            wait "${pids[$key]}"
            say "$key exited with $?"
        fi
    done
    for key in "${!pids[@]}"; do
        if [ ! -f "$runs/$key/trained.json" ] && [ -f "$runs/$key/best.pt" ]; then
            experiment "${configs[$key]}" "$runs/${key%%/*}" "$runs/${key/\//-}-eval.log" --rows "${key#*/}" \
                --evaluate-paused
            pids[$key]=$!
            say "evaluating the paused row $key"
        fi
    done
    until_all_done "$eval_end"
    for key in "${!pids[@]}"; do
        if kill -0 "${pids[$key]}" 2> /dev/null; then
            kill -KILL "${pids[$key]}"
            say "stopped $key: its evaluation did not finish in time"
        fi
    done
    (cd "$runs" && tar czf "$out/runs.tgz" --exclude='*.pt' --exclude='runs.tgz' --exclude='log.txt' .)
    say "done: $out/runs.tgz"
}

experiment() {  # CONFIG OUT LOG [OPTION ...]: `pyro-attention experiment` on the device, in the background
    $py -m pyro_attention experiment run --config "$1" --out "$2" --device "$dev" --threads 1 --quiet "${@:4}" \
        > "$3" 2>&1 &
}

with_data_dir() {  # FILE NAME: the experiment file to use -- FILE, or with DATA_DIR its copy RUNS/NAME.toml
    if [ -n "${DATA_DIR:-}" ]; then
        sed "s#^data_dir = .*#data_dir = \"$DATA_DIR\"#" "$1" > "$runs/$2.toml"
        echo "$runs/$2.toml"
    else
        echo "$1"
    fi
}

until_all_done() {  # wait until every row's process has ended or the clock reaches $1 seconds from the start
    local key alive
    while [ $(( $(date +%s) - t0 )) -lt "$1" ]; do
        alive=0
        for key in "${!pids[@]}"; do
            kill -0 "${pids[$key]}" 2> /dev/null && alive=1
        done
        [ $alive = 0 ] && return
        sleep 2
    done
}

start_mps() {  # an MPS daemon when the machine has one and it answers; else the rows take turns on the GPU
    command -v nvidia-cuda-mps-control > /dev/null || return 0
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
    mkdir -p /tmp/mps /tmp/mps-log
    if nvidia-cuda-mps-control -d >> "$log" 2>&1 \
            && timeout 40 "$py" -c "import torch; torch.ones(1, device='cuda').sum().item()" >> "$log" 2>&1; then
        say "MPS on"
    else
        echo quit | nvidia-cuda-mps-control > /dev/null 2>&1
        unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
        say "MPS off (it did not start)"
    fi
}

main "$@"
