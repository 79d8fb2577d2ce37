#!/usr/bin/env bash
# The chip side of `train speedrun --preset v5e`: the default model trained on one TPU v5e chip
# lent in commands of at most 10 minutes (a machine that stays warm ~100 s between them, its /tmp
# kept). Each call runs a chunk: the speedrun under `timeout`, whose SIGTERM makes the running
# training stage save and exit (train/speedrun.py passes it on), so the next call's `run`
# resumes from the last save; a lost machine costs one chunk. Run from the repository root:
#
#   bash train/v5e.sh setup                         # installs into /tmp/site (once per machine)
#   bash train/v5e.sh run 9 data,tokenizer,base,synth,sft,dpo,export   # a 9-minute chunk
#   bash train/v5e.sh run 9 base,sft --extra 'base=--steps 8600'      # speedrun's own flags follow
#   bash train/v5e.sh sweep                         # bench/shape_sweep.py on the chip
#   bash train/v5e.sh pack [sft]                    # the exported model (and sft's) and logs to $OUT
#
# Synth and evals run on CPUs: synth beside base on the host's cores (or made ahead on any machine
# with the preset's settings and carried in .chip/run.tar.xz as synth/, or with other seeds or package
# roots as synth-<name>/: sft and dpo read every set, see `run`; English from train/english.sh as
# eng/ joins the data stage's sources), evals on a machine with the
# agent's sandbox (the chip's host has none). Calls carry .whl-tpu and .chip (git-ignored); fill
# .whl-tpu once on a machine with the package index:
#   pip download --no-deps --only-binary=:all: --python-version 311 --platform manylinux2014_x86_64 \
#       --platform manylinux_2_28_x86_64 -d .whl-tpu tiktoken==0.14.0 rustbpe==0.1.0
set -euo pipefail

RUN=${RUN:-/tmp/nanocode-v5e}
SITE=${SITE:-/tmp/site}
STDLIB=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
SEED=${SEED:-.chip/run.tar.xz}  # work made elsewhere (see `run`); xz: a carry holds 64 MiB
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
    minutes=${2:?usage: v5e.sh run MINUTES STAGES [SPEEDRUN FLAGS]}
    stages=${3:?usage: v5e.sh run MINUTES STAGES [SPEEDRUN FLAGS]}
    # work made elsewhere, carried as $SEED (a run directory's files: a base from an earlier
    # stretch, synth made ahead with the preset's settings, their .done marks) seeds $RUN; what
    # this machine already has wins, so a chunk never goes back
    if [ -f "$SEED" ]; then
        tar -xf "$SEED" -C "$RUN" --skip-old-files
    fi
    if [ -d "$RUN/eng" ]; then  # English made by train/english.sh, carried in the seed as eng/
        SRC="$SRC $RUN/eng"
    fi
    # the chip's host has no user namespaces, so synth's checks cannot be sandboxed: it is a
    # throwaway machine (nothing of the user's, no keys), so run them without (tools/checks.py)
    export NANOCODE_UNSANDBOXED=1
    # shellcheck disable=SC2086
    timeout -s TERM -k 90 "${minutes}m" python3 -m train.cli speedrun --preset v5e --run-dir "$RUN" --resume \
        --only "$stages" --src $SRC "${@:4}" || echo "v5e: chunk ended (exit $?): rerun \`v5e.sh run\` to go on"
    { ls "$RUN"/*.done 2>/dev/null || true; } | xargs -rn1 basename  # none yet is no failure
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
    for stage in "${@:2}"; do  # `pack sft`: that stage exported too, to measure what the next one adds
        [ -d "$RUN/model_$stage/checkpoints" ] || python3 -m train.cli export --from "$RUN/$stage" --out "$RUN/model_$stage"
        tar -C "$RUN" -czf - "model_$stage" | split -b 15M - "$out/model_$stage.tgz."
    done
    tar -C "$RUN" -czf "$out/logs.tgz" logs $(cd "$RUN" && ls -d ./*.done ./*/metrics.jsonl ./data/*/data.json \
        ./synth/stats.json 2>/dev/null)
    ls -la "$out"
    ;;
*)
    echo "usage: bash train/v5e.sh setup | run MINUTES STAGES [SPEEDRUN FLAGS] | sweep [CANDIDATES] | pack [STAGE...]" >&2
    exit 2
    ;;
esac
