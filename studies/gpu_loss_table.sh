#!/usr/bin/env bash
# The full-scale loss table (recipe gpu-resnet18: CIFAR ResNet-18, all 5,000 training images of
# each of the 6 ID classes, all test images) on a device machine, in one call.
#
#   here:    bash studies/gpu_loss_table.sh pack
#            -> .gpu-data.tar.gz (git-ignored): the 6 ID class folders of cifar10-train, cifar10-test,
#               and imagenet-val-1300 down-sampled once to 32 px PNGs (the pixels the CPU study
#               computes on the fly); about 30 MB gzipped, within a device call's 64 MiB.
#   device:  run(command="bash studies/gpu_loss_table.sh run", carry=[".gpu-data.tar.gz"],
#                timeout_s=600)
#            EPOCHS (default 15) and SEEDS (default 1) size it: the paper's schedule is
#            EPOCHS=200 SEEDS=3, about 15 x 200 ResNet-18 epochs of 30,000 images, far more than
#            one 10-minute call; bench_recipe's images/s (printed first) says what fits.
#   after:   rm .gpu-data.tar.gz   (a copy of ../shared/data: never commit it)
#
# Writes $OUT/bench_recipe_gpu-resnet18.json and $OUT/loss_table_gpu-resnet18.json.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
pack)
    python=${PYTHON:-/work/main/.venv/bin/python}
    staging=$(mktemp -d)
    shared=../shared/data
    mkdir -p "$staging/cifar10-train"
    for c in airplane automobile bird cat deer dog; do
        cp -r "$shared/cifar10-train/$c" "$staging/cifar10-train/"
    done
    cp -r "$shared/cifar10-test" "$staging/"
    PYTHONPATH=$PWD/src "$python" - "$shared/imagenet-val-1300" "$staging/imagenet-val-1300-32px/all" <<'PY'
import sys
from pathlib import Path

from PIL import Image

from oodbench.data.imagenet_val import ImageNetVal
from oodbench.train.tensor_images import tensor_images

far = tensor_images(ImageNetVal(sys.argv[1]), size=32)
out = Path(sys.argv[2])
out.mkdir(parents=True)
for i, image in enumerate(far.images.permute(0, 2, 3, 1).numpy()):
    Image.fromarray(image).save(out / f"{i:04d}.png")
PY
    tar czf .gpu-data.tar.gz -C "$staging" .
    rm -rf "$staging"
    ls -la .gpu-data.tar.gz
    ;;
run)
    out=${OUT:-/tmp/out}
    mkdir -p /tmp/data "$out"
    tar xzf .gpu-data.tar.gz -C /tmp/data
    # the loss table uses no faiss detector; the image may lack faiss, which oodbench.detectors
    # imports at start: a stand-in module that fails loudly if anything does use it
    if ! python3 -c "import faiss" 2>/dev/null; then
        mkdir -p /tmp/stub/faiss
        printf 'def __getattr__(name):\n    raise ImportError("faiss is not installed on this machine")\n' \
            > /tmp/stub/faiss/__init__.py
        export PYTHONPATH=/tmp/stub
    fi
    export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} OODBENCH_CACHE=/tmp/cache
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    python3 speed/bench_recipe.py --recipe gpu-resnet18 --device cuda --threads 8 \
        --data-root /tmp/data --images 12000 --rounds 3 --out "$out/bench_recipe_gpu-resnet18.json"
    python3 studies/loss_table.py --recipe gpu-resnet18 --device cuda --threads 8 \
        --data-root /tmp/data --epochs "${EPOCHS:-15}" --seeds "${SEEDS:-1}" \
        --out "$out/loss_table_gpu-resnet18.json"
    ;;
*)
    echo "usage: bash studies/gpu_loss_table.sh pack|run" >&2
    exit 2
    ;;
esac
