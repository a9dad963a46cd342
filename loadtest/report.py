"""A run's report in Markdown, rendered from its saved results only (so it can be re-made)."""

from loadtest.results import RunResult
from loadtest.stats import Distribution, Figures, figures

DEFINITIONS = """\
Definitions (times from the client's clock; percentiles interpolate linearly, as `vllm bench serve`):
- **TTFT**: sending a request → its first streamed text. **E2E**: sending → its last streamed text.
- **TPOT** (vLLM's name = GuideLLM's *ITL*): per request (E2E − TTFT) / (output tokens − 1).
- **ITL** (vLLM's name): every gap between consecutive streamed pieces (one token each), pooled over requests.
- **GuideLLM TPOT**: per request E2E / output tokens (first token included).
- **Throughput**: completed requests (output tokens, the server's count) / duration, from the first
  scheduled send to the last end.
- **Goodput**: completed requests with TTFT ≤ the target, per second. A level **meets the target** when
  the p95 TTFT over all its requests, a failed one counted as never answering, is ≤ the target.
- **Cached ratio**: cached / prompt tokens from each response's usage. **Server cache**: the change of
  vLLM's `prefix_cache_hits_total` / `prefix_cache_queries_total` over the level (read after a pause).
- **Server's own histograms**: the change of vLLM's TTFT, ITL and E2E histograms over the level;
  client − server is what the client and its path (through the service: the service too) add.
- **Send lag**: how late the client sent each request against the schedule (or against the moment its pupil
  was free to ask, if later); **client CPU**: the client process's CPU time per request. Both measure the load
  tester itself.
- **Waiting for the pupil's previous answer** (through the service): a pupil asks one question at a time, so a
  question due while the pupil's last answer still streams waits for it to end; counted over those that waited.
  The workload's own shape, apart from latency and from send lag."""


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f}"


def _row(name: str, d: Distribution) -> str:
    return f"| {name} | {d.count} | {_ms(d.mean)} | {_ms(d.p50)} | {_ms(d.p90)} | {_ms(d.p95)} | {_ms(d.p99)} |"


def level_table(f: Figures) -> list[str]:
    errors = ", ".join(f"{k}: {v}" for k, v in f.errors.items()) or "none"
    lines = [
        f"### {f.label}",
        "",
        f"{f.completed}/{f.requests} completed in {f.duration_s:.2f} s; errors: {errors}. "
        f"Throughput {f.request_throughput:.3f} req/s, {f.output_throughput:.1f} output tok/s; "
        f"mean prompt {_ms(f.prompt_tokens_mean)} and output {_ms(f.output_tokens_mean)} tokens.",
        f"Goodput {f.goodput:.3f} req/s ({f.goodput_fraction:.0%} of requests within TTFT ≤ {f.ttft_target_ms:g} ms); "
        f"p95 TTFT (failures as misses) {_ms(f.p95_ttft_all_ms)} ms: "
        f"**{'meets' if f.meets_target else 'misses'} the target**.",
        "",
        "| ms | n | mean | p50 | p90 | p95 | p99 |",
        "|---|---|---|---|---|---|---|",
        _row("TTFT", f.ttft_ms),
        _row("TPOT (vLLM) = ITL (GuideLLM)", f.tpot_ms),
        _row("ITL (vLLM, pooled gaps)", f.itl_ms),
        _row("TPOT (GuideLLM)", f.guidellm_tpot_ms),
        _row("E2E", f.e2e_ms),
        _row("send lag (client)", f.send_lag_ms),
    ]
    if f.pupil_wait_ms.count:  # the pupil API: the questions that waited for their pupil's previous answer
        lines.append(_row("waiting for the pupil's previous answer", f.pupil_wait_ms))
    if f.service_ttft_ms.count:
        lines += [
            _row("service's own TTFT of vLLM", f.service_ttft_ms),
            _row("TTFT − service's (HTTP, SSE, auth)", f.service_overhead_ttft_ms),
        ]
    lines.append("")
    cache = f.cache
    lines.append(
        f"Cached tokens (usage): {cache.cached_tokens:,}/{cache.prompt_tokens:,}"
        + (f" = {cache.ratio:.1%}" if cache.ratio is not None else "")
        + f". Client CPU {_ms(f.client_cpu_ms_per_request)} ms a request."
    )
    if f.cache_by_class:
        lines += ["", "| class | prompt tokens | cached | ratio |", "|---|---|---|---|"]
        lines += [
            f"| {g} | {c.prompt_tokens:,} | {c.cached_tokens:,} | {'–' if c.ratio is None else f'{c.ratio:.1%}'} |"
            for g, c in f.cache_by_class.items()
        ]
    for s in f.server_cache:
        if s.queries is None:
            lines.append(f"\nServer cache counters at {s.url}: not available.")
        else:
            ratio = "–" if s.hit_ratio is None else f"{s.hit_ratio:.1%}"
            lines.append(
                f"\nServer cache counters at {s.url}: +{s.hits:,.0f} hit tokens "
                f"of +{s.queries:,.0f} queried ({ratio}); "
                f"+{s.prompt_tokens or 0:,.0f} prompt and +{s.generation_tokens or 0:,.0f} generated tokens."
            )
    for t in f.server_timing:
        if t.requests is None:
            continue
        lines.append(
            f"\nServer's own histograms at {t.url}: {t.requests:,.0f} requests; mean TTFT {_ms(t.ttft_mean_ms)}, "
            f"ITL {_ms(t.itl_mean_ms)}, E2E {_ms(t.e2e_mean_ms)} ms"
            + (
                f"; client − server: TTFT {_signed(t.client_minus_server_ttft_ms)}, "
                f"ITL {_signed(t.client_minus_server_itl_ms)}, E2E {_signed(t.client_minus_server_e2e_ms)} ms."
                if t.client_minus_server_ttft_ms is not None
                else "."
            )
        )
    return lines


def _signed(value: float | None) -> str:
    return "–" if value is None else f"{value:+,.2f}"


def render(result: RunResult) -> str:
    c, w, m, e = result.config, result.workload, result.model, result.environment
    shape = f"prompts of exactly {w.prompt_tokens} tokens" if w.prompt_tokens else f"{len(w.classes)} class(es)"
    if w.classes:
        shape += "; " + ", ".join(f"{k.group}: {k.pupils} pupils, passage {k.passage_tokens} tokens" for k in w.classes)
        shape += f"; burst then {w.trickle_per_class} single questions a class"
    stand_in = m.kind == "standin"
    lines = [
        f"# Load test: {c.variant}, {w.kind} workload, {c.target} target ({result.created})",
        "",
        f"- target: {c.target} at {c.url}; model `{m.served_name}`: {m.description}",
        f"- workload: {w.kind}, {shape}; answers of {w.output_tokens} tokens"
        + (" exactly (ignore_eos, min_tokens)" if w.ignore_eos else " at most")
        + f"; temperature {w.temperature:g}; passages primed first: {'yes' if w.primed_passages else 'no'}",
        f"- seed {c.seed}; warm-up {c.warmup_requests} requests on other prompts (excluded); "
        f"cap {c.max_requests} requests a level, safety deadline {c.max_seconds:g} s; "
        f"TTFT target {c.ttft_target_ms:g} ms",
        f"- machine: {e.cpu} ({e.cpu_count} cores), GPU: {e.gpu or 'none'}; Python {e.python}; "
        + ", ".join(f"{k} {v}" for k, v in sorted(e.packages.items()))
        + (f"; commit {e.git_commit[:10]}" if e.git_commit else ""),
    ]
    lines += [f"- note: {n}" for n in c.notes]
    if stand_in:
        lines.append("- **the model is the offline stand-in: speeds are the real shapes', the words are gibberish**")
    lines += ["", DEFINITIONS, ""]
    for bench in result.benchmarks:
        if bench.stopped_by == "deadline":
            lines.append(f"**{bench.label} was stopped by the safety deadline; cut requests are counted as errors.**\n")
        lines += level_table(figures(bench, c.ttft_target_ms))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
