"""Every setting of the service, the backend and the local stack, read once from the environment.

Variables are prefixed `CLASSROOM_` and nested with `__`, e.g. `CLASSROOM_BACKEND__BASE_URL`.
"""

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from service import model_manifest

# The names of each setting's choices, defined here once and imported where they are used.
StandinSize = Literal["tiny", "0.5b", "1.5b"]  # Qwen2.5's shapes: the real checkpoint from the hub, else the stand-in
SmallModel = Literal["smollm2-135m"]  # a small real model that needs no hub (service/local/model/small.py)
ModelSize = Literal[StandinSize, SmallModel]  # what `classroom model prepare --size` makes
Device = Literal["cpu", "gpu"]
PromptFormat = Literal["chat", "token_ids"]
PromptLayout = Literal["passage_first", "question_first"]
Routing = Literal["affinity", "round_robin", "gateway"]
PROJECT_ROOT = Path(__file__).resolve().parents[1]


def root_url(base_url: str) -> str:
    """Where a vLLM server's /health and /metrics live: its OpenAI base URL without the /v1."""
    return base_url.rstrip("/").removesuffix("/v1")


class ApiSettings(BaseModel):
    host: str = "127.0.0.1"
    port: int = 8000
    # Service processes behind the one port (state is in Redis). 0: one for every four cores, 1 to 4, so that
    # vLLM's own API server and engine keep theirs (`classroom up` runs them on the same machine).
    workers: int = Field(default=0, ge=0)
    # A log line for every request: off, nobody reads them and they cost CPU on the hot path.
    access_log: bool = False
    # Where worker processes meet to add up their metrics (set by `classroom serve` for more than one).
    metrics_dir: Path | None = None
    # The proxies whose X-Forwarded-For is believed (uvicorn's forwarded_allow_ips): addresses or CIDR ranges,
    # comma-separated. The client is the right-most address in it that is not one of them, so the limits on
    # failed joins and sign-ins count each school, not the ingress. Behind Kubernetes: the ingress controller's
    # pod range. "*" believes anyone, which lets any client claim any address: never where clients reach
    # the service directly.
    forwarded_allow_ips: str = "127.0.0.1"
    # How often each process times its event loop's lag (classroom_event_loop_lag_seconds): often enough to
    # see a burst's, a wake-up costing microseconds.
    loop_lag_interval_s: float = Field(default=0.05, gt=0)
    # Full garbage collections made by the process when no answer is being written (service/quiet_collector.py):
    # looked for every `gc_check_s`, at most one every `gc_least_s`, and one after `gc_most_s` whatever the load.
    gc_check_s: float = Field(default=1.0, gt=0)
    gc_least_s: float = Field(default=60.0, gt=0)
    gc_most_s: float = Field(default=600.0, gt=0)

    def resolved_workers(self, cores: int) -> int:
        return self.workers or max(1, min(4, cores // 4))


class RedisSettings(BaseModel):
    url: str = "redis://127.0.0.1:6390/0"
    # Connections of one service process; a command waits for a free one. A question borrows one for a round
    # trip; open pages hold none (every channel the process listens to shares one: `store.Subscriptions`).
    max_connections: int = 64
    # Opened at start, so that a class's first burst does not pay for them (~0.7 ms of CPU each).
    warm_connections: int = 32
    # The Redis `classroom up` starts: the most memory it may take (maxmemory; 0: unbounded). At the bound it
    # refuses writes (noeviction: nothing stored is ever dropped) and the service says its store is full.
    maxmemory_mb: int = Field(default=1024, ge=0)

    @property
    def port(self) -> int:
        return urlsplit(self.url).port or 6379


class ModelSettings(BaseModel):
    # The folder vLLM serves and the service reads its tokenizer from.
    dir: Path = Path("var/models/default")
    # What `classroom up` prepares. auto: where the hub is reachable, Qwen2.5 (1.5b on a GPU; 0.5b on a CPU, where
    # 1.5b takes 8-26 s to start an answer and 0.5b a few seconds); where it is not, the small real model (real
    # sentences) rather than a stand-in's gibberish (README, "Which model runs").
    size: Literal["auto", ModelSize] = "auto"
    # Build Qwen2.5's offline stand-in (random weights) even where the hub is reachable, or instead of the small
    # real model where it is not: for figures that must have the product's shapes (speed, memory, capacity).
    standin: bool = False
    seed: int = 0
    # `classroom up` also serves an FP8_DYNAMIC copy of `dir` (made once by deploy/scripts/compress-fp8.sh and
    # kept in `fp8_dir`) on `backend.fp8_base_url`, as the variant `fp8` beside `original`: `make run FP8=1`.
    fp8: bool = False
    fp8_dir: Path = Path("var/models/fp8")

    def resolved_size(self, on_gpu: bool, hub: bool) -> ModelSize:
        """The model to prepare, given the hardware and whether the hub answers."""
        if self.size != "auto":
            return self.size
        if not hub and not self.standin:
            return "smollm2-135m"
        return "1.5b" if on_gpu else "0.5b"


class BackendSettings(BaseModel):
    base_url: str = "http://127.0.0.1:8100/v1"
    # Where `classroom up` serves the FP8 copy when `model.fp8` is set (deploy/backends.yaml's fp8 replica).
    fp8_base_url: str = "http://127.0.0.1:8101/v1"
    # The name vLLM serves the model under; unset: the model folder's own (its classroom-model.json: the product's
    # "Qwen/Qwen2.5-1.5B-Instruct" for Qwen2.5 and its stand-ins, the small real model its own): `Settings.served_name`.
    served_model_name: str | None = None
    # vLLM's `--api-key`, where a deployment sets one; a local vLLM takes any.
    api_key: SecretStr = SecretStr("EMPTY")
    # The service's longest wait to reach vLLM: a dead backend must turn into a 503 within 2 s.
    connect_timeout_s: float = 1.0
    # Longest silence while streaming (a cold 1.5B prefill on a laptop CPU takes ~30 s).
    read_timeout_s: float = 120.0
    # The longest prompt and answer; unset: the model folder's own (4,096 for Qwen2.5, 8,192 for SmolLM2-135M), and
    # the passage budget follows it: `Settings.context_length`.
    max_model_len: int | None = Field(default=None, ge=256)
    # vLLM's own virtual environment: its pins clash with the service's, so it lives apart.
    venv: Path = Path(".venv-vllm")
    device: Literal["auto", Device] = "auto"
    # GiB of KV cache vLLM-CPU reserves (its default of 4 is more than a demo needs).
    cpu_kvcache_gib: int = 1
    # vLLM-CPU's thread placement: `auto` puts the model on one core and leaves the other to the API
    # server, the service and Redis on a 2-core machine.
    cpu_omp_threads_bind: str = "auto"
    startup_timeout_s: float = 600.0
    # vLLM's `--max-num-seqs` (unset: vLLM's own default); small, to fill the engine with a few pupils in benchmarks.
    max_num_seqs: int | None = Field(default=None, ge=1)
    # How a question's prompt goes to vLLM. chat: the messages, which vLLM renders and tokenises whole for
    # every question. token_ids: the token ids on /v1/completions; the service tokenises each passage's
    # prompt prefix once and then only each question's part (the same ids, so the same cache hits): a lever
    # for measuring vLLM's per-request rendering and tokenising on a GPU, where the model is fast.
    prompt_format: PromptFormat = "chat"

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        return urlsplit(self.base_url).port or 80

    @property
    def root_url(self) -> str:
        """The server's root (where /health and /metrics live), without the /v1 suffix."""
        return root_url(self.base_url)


class RoutingSettings(BaseModel):
    # Variants and replicas as declared (deploy/backends.yaml); without a file, one variant `original`
    # with the one replica `backend.base_url`.
    backends_file: Path | None = None
    # affinity: rendezvous hashing on the passage over each variant's replicas, with fair turns per replica;
    # round_robin: for comparison in benchmarks. gateway: each variant's "replica" is one URL of a router in
    # front of the GPUs (vLLM production-stack's router, an inference gateway), which routes and queues itself:
    # every question goes to the first healthy one with the passage and the class in the headers below, and the
    # service's own affinity and turns are off (README, "A district").
    policy: Routing = "affinity"
    # gateway: the header the router hashes to keep a session on one replica; the service sends the passage id,
    # so that a class's questions land where its passage is cached. vLLM's Rust router (--policy consistent_hash)
    # reads x-session-id first; production-stack's (--routing-logic session) reads the one --session-key names.
    session_header: str = "x-session-id"
    # gateway: the header a gateway's flow control takes fair turns by; the service sends the class id.
    fairness_header: str = "x-gateway-inference-fairness-id"
    # A replica with this many requests waiting in vLLM's queue is passed over for the next choice.
    max_waiting: float = 4.0
    # One service process probes the replicas (it holds a lease in Redis), every `probe_interval_s`; the others
    # read what it found. Should it die, its lease lapses after `prober_lease_s` and another process takes over.
    probe_interval_s: float = 2.0
    probe_timeout_s: float = 1.0
    # Rounds in a row a replica that was up may leave a probe unanswered within the timeout before it is taken out
    # (a busy host or a late event loop is slow, not down: one miss made every question a false 503). One that
    # refuses the connection or answers an error is out at once.
    probe_misses: int = Field(default=3, ge=1)
    prober_lease_s: float = 6.0
    # How often each process re-reads the shared configuration: a switch reaches all within a second.
    config_poll_s: float = 0.5
    # Send each active passage once (one output token) when it becomes active, and again when a variant
    # or replica does, so that the first pupil already finds it in the cache.
    warmup: bool = True
    # On a fleet change, the passages of the classes used most recently, up to this many.
    warmup_max_passages: int = 200
    # When a replica comes up (as the service first sees it, or back after being down), this many short
    # requests at once, a few tokens each: a fresh vLLM's sampler JIT-compiles its kernels on its first
    # batches (5.8-9 s on an H200), and a class-sized batch pays that here, not the first class of the
    # day. 0: none. Part of warm-up: `warmup: false` turns it off too.
    warmup_burst: int = Field(default=32, ge=0)
    # Nobody waits on a burst: its requests may take this long to connect (a replica's API server on a busy host
    # accepts 32 connections slowly; a pupil's question keeps `backend.connect_timeout_s`), and one that could
    # not connect, or whose answer never came, is sent again, up to this many attempts in all, a moment apart.
    warmup_connect_timeout_s: float = Field(default=10.0, gt=0)
    warmup_attempts: int = Field(default=3, ge=1)


class AnswerSettings(BaseModel):
    max_tokens: int = 256
    temperature: float = 0.3
    # OpenAI's frequency penalty: each time a token was already written in this answer, its logit is lowered by
    # this much (0: off). It counts the answer's own tokens only (vLLM's repetition_penalty also punishes the
    # passage's words, which pushes a model away from the passage).
    # 0.5 chosen with the rubric on the real small model (results/quality-cpu-smollm2/README.md).
    frequency_penalty: float = Field(default=0.5, ge=-2.0, le=2.0)
    # While a question waits for its first token (and all along), an SSE comment this often keeps
    # proxies with idle timeouts (nginx's proxy_read_timeout, load balancers) from cutting the stream.
    keepalive_s: float = 10.0
    # An open page's stream (a pupil's class notices, a teacher's feed) tells the browser to reconnect after a delay
    # drawn between 1 s and this (SSE's `retry:`): the thousands of pages a pod drops when it rolls come back
    # spread over it, rather than all at once after the browser's default ~3 s.
    page_reconnect_max_s: float = Field(default=10.0, ge=1.0)
    # The longest an answer may take (a Stop's note to its writer lasts this long; a question's turn on a
    # replica lapses after it). 256 tokens take ~20 s on a CPU with 0.5b, ~2 s on a GPU.
    longest_s: float = 180.0
    # A pupil may ask again only when their answer has ended. Its writer's process renews the answer's lease
    # every third of this: should the process die mid-answer, the pupil may ask again within this, and the
    # answer is stored cut short within a third more. Longer than any stall of a process's event loop.
    writer_lease_s: int = Field(default=6, ge=2)
    # An answer is written to its end whatever the pupil's connection does; its text so far is stored in its
    # record this often (one Redis command), so that a page that comes back to another service process
    # follows it from there, and the pupil's history shows it.
    progress_s: float = Field(default=1.0, gt=0)
    # A pupil's Stop waits this long at most for the answer to be stored as stopped.
    stop_wait_s: float = Field(default=5.0, ge=0)

    # passage_first: the passage opens every prompt, so a class shares it in vLLM's prefix cache
    # (prompts/README.md). question_first: the pupil's question before the passage, as a naive prompt would
    # have it, so pupils share only the instructions; for benchmarking what passage-first buys.
    prompt_layout: PromptLayout = "passage_first"

    def sampling(self) -> dict[str, float | int]:
        """What every answer's request asks of vLLM's sampler (the rubric asks the same)."""
        chosen: dict[str, float | int] = {"max_tokens": self.max_tokens, "temperature": self.temperature}
        if self.frequency_penalty:
            chosen["frequency_penalty"] = self.frequency_penalty
        return chosen


class TurnSettings(BaseModel):
    """Fair turns between classes: a class's burst must not make another class's pupil wait behind all of it.
    Beyond `max_in_flight_per_replica` questions on one replica, the rest wait in the service (in Redis, shared
    by every process), the classes waiting taking turns and each class first come, first served; vLLM's own
    queue is first come, first served across everyone."""

    # Set it near what the replica runs at once well (vLLM's --max-num-seqs, or the knee of a load test's
    # sweep): below it the engine is not full and nobody waits; 0 turns waiting in line off. On the H200 a
    # bound of 32 or 64 made 4 classes of 30 at once wait 1.0-1.8 s at p95 against 0.25 s unbounded
    # (results/h200-2026-12-03-levers): the engine ran all 120 well, and each turn waits a whole
    # answer. 256 is vLLM's own --max-num-seqs default on smaller GPUs (1024 on an H100/H200).
    max_in_flight_per_replica: int = Field(default=256, ge=0)
    # Questions waiting for one replica at most; one more is refused (429) and stored as refused.
    max_waiting_per_replica: int = Field(default=512, ge=1)
    # A question waits this long for its turn at most, then is stored failed with a sentence.
    max_wait_s: float = 60.0
    # A waiting page's place in line is refreshed this often (and a turn whose notice was lost is found).
    poll_s: float = 1.0
    # What a refused pupil is told to wait.
    retry_after_s: int = 10


class LimitSettings(BaseModel):
    question_max_chars: int = 300
    # Room kept in every prompt for the question; a question over it is refused.
    question_max_tokens: int = 128
    # Per pupil, over a moving minute: enough for a curious child, not for a script.
    questions_per_minute: int = 6
    upload_max_bytes: int = 5 * 1024 * 1024


class DocumentSettings(BaseModel):
    """Uploaded files are read in a child process each (service/classroom/document_worker.py), within limits of
    its own, so that no file can take the service's memory or its event loop: past a limit the teacher is told
    to paste the text instead."""

    # Files read at once by one service process; more wait their turn (each reader may take `memory_mib`).
    readers: int = Field(default=2, ge=1)
    # The reader's address space (RLIMIT_AS): Python with lxml and pypdf takes ~100 MiB of it before reading.
    memory_mib: int = Field(default=768, ge=128)
    # CPU seconds a reader may spend (RLIMIT_CPU): what says a file is too heavy, however busy the machine. A
    # 200-page PDF takes ~5 s of a core.
    time_s: float = Field(default=20.0, gt=0)
    # Wall-clock seconds before a reader is stopped whatever it does (never less than `time_s`). A reader runs at a
    # lower priority than the service, so on a busy machine it gets a share of a core and its wall-clock time
    # stretches where its CPU time does not: this bound ends a reader that is stuck, not one that is slow.
    wall_s: float = Field(default=120.0, gt=0)
    # A PDF with more pages is refused unread: a passage fills a few pages, and slides a few dozen.
    max_pages: int = Field(default=200, ge=1)
    # A .docx's text part (word/document.xml) uncompressed: a passage's is tens of kilobytes, a 300-page book's
    # a few megabytes.
    max_xml_mib: int = Field(default=32, ge=1)
    # How much smaller than itself that part may be compressed: XML text compresses 5-20 times, a zip bomb
    # hundreds of times.
    max_compression_ratio: int = Field(default=100, ge=2)


class SchoolSettings(BaseModel):
    # The school's clock, an IANA time zone name ("Europe/London", "America/Chicago"): the questions' export
    # gives each time in it, beside UTC. Checked at start-up: a misspelt zone stops the service, not an export.
    time_zone: str = "Europe/London"
    # How long questions stay in the store (Redis) after they were asked: a school year by default. Older
    # ones are archived to files the teacher can download (`archive.csv`) and taken out of Redis, whose memory
    # is then bounded by what the district asks within this many days (benchmarks/results/retention.md).
    retention_days: int = Field(default=365, ge=1)
    # How often one service process looks for questions past retention.
    retention_check_s: float = Field(default=3600.0, gt=0)
    # Where archived questions are kept, reachable by every service process (a shared volume in a
    # district); None: `archive` under the state folder.
    archive_dir: Path | None = None

    @field_validator("time_zone")
    @classmethod
    def _known_zone(cls, name: str) -> str:
        try:
            ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"'{name}' is not a time zone of the IANA database, such as 'Europe/London'") from exc
        return name

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)  # zoneinfo keeps one instance a name


PLACEHOLDER_SECRET = "change-me"


class AuthSettings(BaseModel):
    # Operators send it as `Authorization: Bearer <token>`. The placeholder is refused outside development.
    operator_token: SecretStr = SecretStr(PLACEHOLDER_SECRET)
    teacher_session_hours: float = 12.0
    # A school day: a pupil joins once in the morning.
    pupil_session_hours: float = 8.0
    # Wrong class codes (or wrong passwords) one client address may try within the window before it must
    # wait. A whole school behind one address mistypes far fewer; a script guessing codes (31^8 of them)
    # gets nowhere at this pace.
    failed_attempts_per_client: int = 100
    failed_attempts_window_s: int = 600
    # Cookies only over HTTPS; off for the local stack on http://127.0.0.1, required in production.
    secure_cookies: bool = False
    # Sites other than the service's own host allowed to write with its cookies (e.g. a school's portal
    # at another address that proxies to it), as origins: ["https://portal.school.example"].
    allowed_origins: list[str] = Field(default_factory=list)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CLASSROOM_", env_nested_delimiter="__", extra="ignore")

    # development: the local stack; production refuses placeholder secrets.
    environment: Literal["development", "production"] = "development"
    # Runtime state of the local stack: Redis data, logs, pid files, models.
    state_dir: Path = Path("var")
    prompts_dir: Path = PROJECT_ROOT / "prompts"
    frontend_dir: Path = PROJECT_ROOT / "frontend"
    api: ApiSettings = Field(default_factory=ApiSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    model: ModelSettings = Field(default_factory=ModelSettings)
    backend: BackendSettings = Field(default_factory=BackendSettings)
    routing: RoutingSettings = Field(default_factory=RoutingSettings)
    answer: AnswerSettings = Field(default_factory=AnswerSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    documents: DocumentSettings = Field(default_factory=DocumentSettings)
    turns: TurnSettings = Field(default_factory=TurnSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    school: SchoolSettings = Field(default_factory=SchoolSettings)

    def served_name(self, model_dir: Path | None = None) -> str:
        """The name vLLM serves the model under: `backend.served_model_name`, else the model folder's own."""
        return model_manifest.served_name(model_dir or self.model.dir, self.backend.served_model_name)

    def context_length(self, model_dir: Path | None = None) -> int:
        """The longest prompt and answer: `backend.max_model_len`, else the model folder's own."""
        return model_manifest.context_length(model_dir or self.model.dir, self.backend.max_model_len)

    @model_validator(mode="after")
    def _no_placeholder_secrets_in_production(self) -> "Settings":
        if self.environment == "production" and self.auth.operator_token.get_secret_value() == PLACEHOLDER_SECRET:
            raise ValueError("set CLASSROOM_AUTH__OPERATOR_TOKEN: the placeholder is refused in production")
        if self.environment == "production" and not self.auth.secure_cookies:
            raise ValueError(
                "set CLASSROOM_AUTH__SECURE_COOKIES=true: in production sessions travel over HTTPS only "
                "(serve the service behind TLS)"
            )
        return self
