#!/usr/bin/env bash
# The chip side of `train speedrun --preset v5e`: the default model trained on one TPU v5e chip
# lent in commands of at most 10 minutes (a machine that stays warm ~100 s between them, its /tmp
# kept). Each call runs a chunk: the speedrun under `timeout`, whose SIGTERM makes the running
# training stage save and exit (train/speedrun.py passes it on), so the next call's `run`
# resumes from the last save; a lost machine costs one chunk. Run from the repository root:
#
#   bash train/v5e.sh setup                         # installs into /tmp/site (once per machine)
#   bash train/v5e.sh run 9 data,tokenizer,base,synth,sft,dpo,export   # a 9-minute chunk
#   bash train/v5e.sh sweep                         # bench/shape_sweep.py on the chip
#   bash train/v5e.sh pack                          # the exported model and logs to $OUT
#
# Synth and evals run on CPUs: synth beside base on the host's cores (and made ahead on any
# machine with the preset's settings: put its synth/partial.jsonl at .chip/synth_partial.jsonl.gz,
# it is resumed from), evals on a machine with the agent's sandbox (the chip's host has none).
set -euo pipefail

RUN=${RUN:-/tmp/nanocode-v5e}
SITE=${SITE:-/tmp/site}
STDLIB=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
SRC=${SRC:-"/opt/pypi/files $STDLIB"}  # the machine's offline package index (wheels) + the stdlib
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}:$SITE"  # the machine's JAX stays ahead of /tmp/site
export NANOCODE_HOME=${NANOCODE_HOME:-$RUN/home} PYTHONUNBUFFERED=1
mkdir -p "$RUN"

case "${1:-}" in
setup)
    if [ ! -f "$SITE/.done" ]; then
        t0=$SECONDS
        # the tokenizer's packages are not in the machine's index: carried as wheels (.whl-tpu)
        PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-compile \
            --no-cache-dir --upgrade --target "$SITE" .whl-tpu/*.whl
        PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: --no-compile \
            --index-url file:///opt/pypi/simple --target "$SITE" optax==0.2.8 orbax-checkpoint tqdm pyarrow
        touch "$SITE/.done"
        echo "v5e: setup in $((SECONDS - t0)) s"
    fi
    python3 -c 'import jax, optax, orbax.checkpoint, tiktoken, rustbpe, pyarrow, tqdm; print("v5e:", jax.devices())'
    ;;
run)
    minutes=${2:?usage: v5e.sh run MINUTES STAGES}
    stages=${3:?usage: v5e.sh run MINUTES STAGES}
    carried=.chip/synth_partial.jsonl.gz  # the same (seed, i) jobs: the longer file holds the other
    if [ -f "$carried" ] && [ ! -f "$RUN/synth.done" ]; then
        mkdir -p "$RUN/synth"
        gunzip -c "$carried" > "$RUN/synth/carried.jsonl"
        have=$({ cat "$RUN/synth/partial.jsonl" 2>/dev/null || true; } | wc -l)
        if [ "$(wc -l < "$RUN/synth/carried.jsonl")" -gt "$have" ]; then
            mv "$RUN/synth/carried.jsonl" "$RUN/synth/partial.jsonl"
            echo "v5e: synth resumes after $(($(wc -l < "$RUN/synth/partial.jsonl") - 1)) conversations made ahead"
        fi
        rm -f "$RUN/synth/carried.jsonl"
    fi
    # shellcheck disable=SC2086
    timeout -s TERM -k 90 "${minutes}m" python3 -m train.cli speedrun --preset v5e --run-dir "$RUN" --resume \
        --only "$stages" --src $SRC || echo "v5e: chunk ended (exit $?): rerun \`v5e.sh run\` to go on"
    ls "$RUN"/*.done 2>/dev/null | xargs -rn1 basename
    ;;
sweep)
    python3 bench/shape_sweep.py --out "${OUT:-$RUN}/shape_sweep.json" "${@:2}"
    ;;
pack)
    # the newest trained stage is exported if the speedrun's export has not run
    if [ ! -d "$RUN/model/checkpoints" ]; then
        for stage in dpo sft base; do
            if compgen -G "$RUN/$stage/checkpoints/[0-9]*" > /dev/null; then
                python3 -m train.cli export --from "$RUN/$stage" --out "$RUN/model"
                break
            fi
        done
    fi
    out=${OUT:?pack writes to \$OUT}
    tar -C "$RUN" -czf - model | split -b 15M - "$out/model.tgz."  # files come back in <= 16 MiB pieces
    tar -C "$RUN" -czf "$out/logs.tgz" logs $(cd "$RUN" && ls -d ./*.done ./*/metrics.jsonl ./data/*/data.json \
        ./synth/stats.json 2>/dev/null)
    ls -la "$out"
    ;;
*)
    echo "usage: bash train/v5e.sh setup | run MINUTES STAGES | sweep [CANDIDATES] | pack" >&2
    exit 2
    ;;
esac
