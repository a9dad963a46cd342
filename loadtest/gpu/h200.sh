#!/usr/bin/env bash
# The runs behind loadtest/results/gpu-h200/ (the lent H200, 2026-12-02; the figures are in
# loadtest/README.md). On the H200 after ../shared/gpu's three staging commands (vLLM 0.26 in /tmp/site),
# from the repository root; results go to $OUT (the device tool's), the report is made back here:
#   bash loadtest/gpu/h200.sh prepare     1.5B stand-in, its FP8_DYNAMIC copy, both served (0.4 of the GPU
#                                         each), quality agreement and rubric on both (~5 min)
#   bash loadtest/gpu/h200.sh agreement   loadtest vs `vllm bench serve` on the bf16 server (REPEATS=4
#                                         REQUESTS=20: ~8 min)
#   bash loadtest/gpu/h200.sh rollout     the seed's comparison (256 in / 128 out at 1 and 4 req/s, 60 s),
#                                         4 classes of 30 at once (twice: the first run meets a cold server),
#                                         one class of 30 then a trickle, on each variant (~6 min)
#   classroom loadtest compare loadtest/results/gpu-h200/*-{synthetic-*,classroom-second,classroom-30pupils}.json --gpu-price 3.50 \
#     --agreement .../quality-agreement-1.5b-fp8.json --rubric .../rubric-original.json --rubric .../rubric-fp8.json
set -euo pipefail
# shellcheck source=/dev/null
source /tmp/gpu/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH CLASSROOM_MODEL__DIR=/tmp/models/original
M=/tmp/models
R=${OUT:-/tmp/out}/gpu-h200
mkdir -p "$R"
case ${1:?prepare, agreement or rollout} in
prepare)
  python3 -c "from pathlib import Path; from service.model.prepare import prepare_model, announce; d = Path('$M/original'); print(announce(d, prepare_model(d, '1.5b', 0, standin=True)))"
  PYTHONPATH=/tmp/lc_site:/tmp/site python3 /tmp/gpu/fp8_llmcompressor.py $M/original $M/fp8 2>&1 | tail -2
  cp $M/original/classroom-model.json $M/fp8/
  bash /tmp/gpu/serve.sh bf16 8000 $M/original --enable-prefix-caching --gpu-memory-utilization 0.4
  bash /tmp/gpu/serve.sh fp8 8001 $M/fp8 --enable-prefix-caching --gpu-memory-utilization 0.4
  python3 -m loadtest quality agreement --original http://127.0.0.1:8000/v1 --candidate http://127.0.0.1:8001/v1 \
    --model-dir $M/original --out "$R/quality-agreement-1.5b-fp8.json"
  python3 -m loadtest quality rubric --url http://127.0.0.1:8000/v1 --variant original --model-dir $M/original --out "$R/rubric-original.json" | tail -2
  python3 -m loadtest quality rubric --url http://127.0.0.1:8001/v1 --variant fp8 --model-dir $M/fp8 --out "$R/rubric-fp8.json" | tail -2
  ;;
agreement)
  python3 -m loadtest.agreement --url http://127.0.0.1:8000/v1 --model-dir $M/original --rate 1 --rate 4 \
    --requests "${REQUESTS:-24}" --repeats "${REPEATS:-4}" --bench-cmd "python3 -m vllm.entrypoints.cli.main" \
    --out "$R/agreement-vllm-bench-h200.json" | tail -30
  ;;
rollout)
  for v in original fp8; do
    port=8000; [ $v = fp8 ] && port=8001
    common=(--url "http://127.0.0.1:$port/v1" --model-dir "$M/$v" --variant "$v" --ttft-target-ms 250 --warmup 4)
    python3 -m loadtest run "${common[@]}" --workload synthetic --profile constant --rate 1 --requests 60 \
      --prompt-tokens 256 --output-tokens 128 --out "$R/$v-synthetic-1rps.json" | grep -A3 "^### "
    python3 -m loadtest run "${common[@]}" --workload synthetic --profile constant --rate 4 --requests 240 \
      --prompt-tokens 256 --output-tokens 128 --out "$R/$v-synthetic-4rps.json" | grep -A3 "^### "
    python3 -m loadtest run "${common[@]}" --workload classroom --classes 4 --pupils 30 --passage-tokens 1000 \
      --trickle 10 --profile constant --rate 20 --requests 160 --output-tokens 128 --out "$R/$v-classroom.json" | grep -A3 "^### "
    # Again: the first burst of a fresh server waits seconds for Triton to compile its sampling kernels.
    python3 -m loadtest run "${common[@]}" --workload classroom --classes 4 --pupils 30 --passage-tokens 1000 \
      --trickle 10 --profile constant --rate 20 --requests 160 --output-tokens 128 --out "$R/$v-classroom-second.json" | grep -A3 "^### "
    python3 -m loadtest run "${common[@]}" --workload classroom --classes 1 --pupils 30 --passage-tokens 1000 \
      --trickle 30 --profile constant --rate 4 --requests 60 --output-tokens 128 --out "$R/$v-classroom-30pupils.json" | grep -A3 "^### "
  done
  ;;
esac
