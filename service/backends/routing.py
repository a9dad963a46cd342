"""Which vLLM replica answers a question: variants, canary split, health, and passage affinity.

A *variant* is one deployment of the model (`original`: bf16, `fp8`) with one or more *replicas* (base
URLs). The configuration is declared in a file (deploy/backends.yaml) and lives in Redis, where
operators change it at run time; every service process reads it back within a second.

Routing a question:
1. the variant: the active one, unless the pupil falls in the canary's share (by a hash of the pupil id,
   so a pupil stays on one variant and each variant caches a passage once);
2. the replica: rendezvous hashing on the passage id over the variant's healthy replicas, so every
   question on a passage goes where that passage is already in the prefix cache; a replica whose queue
   (vLLM's own `num_requests_waiting`) is at the bound is passed over for the next choice, so a popular
   passage cannot sink one replica. The rest of the order is the failover order.

In gateway mode the replicas are routers (vLLM's production-stack router, an inference gateway) that choose
the GPU themselves: the service names the passage and the class in headers they key on (`gateway_headers`).
"""

import hashlib
import itertools

from service.records import BackendConfig
from service.settings import Routing


def _score(key: str, replica: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{key}|{replica}".encode(), digest_size=8).digest(), "big")


def rendezvous_order(key: str, replicas: list[str]) -> list[str]:
    """Highest-random-weight order: adding or removing a replica moves only the keys it wins or held."""
    return sorted(replicas, key=lambda replica: _score(key, replica), reverse=True)


def variant_for(config: BackendConfig, pupil_id: str) -> str:
    canary = config.canary
    if canary is not None and _score("canary", pupil_id) % 100 < canary.percent:
        return canary.variant
    return config.active


def replica_order(
    preferred: list[str],
    healthy: set[str],
    waiting: dict[str, float],
    max_waiting: float,
) -> list[str]:
    """The healthy replicas in preference order, those at the queue bound moved behind the others."""
    usable = [url for url in preferred if url in healthy]
    return [url for url in usable if waiting.get(url, 0) < max_waiting] + [
        url for url in usable if waiting.get(url, 0) >= max_waiting
    ]


class Router:
    """Pure routing decisions over a configuration and the replicas' last known health and load."""

    def __init__(self, routing: Routing, max_waiting: float) -> None:
        self.routing = routing
        self.max_waiting = max_waiting
        self._turns = itertools.count()

    def plan(
        self,
        config: BackendConfig,
        pupil_id: str,
        passage_id: str,
        healthy: set[str],
        waiting: dict[str, float],
    ) -> tuple[str, list[str]]:
        """The variant, and its replicas to try in order (empty when none is healthy)."""
        variant = variant_for(config, pupil_id)
        replicas = config.variants[variant].replicas
        if self.routing == "gateway":
            preferred = replicas  # routers: the first that is up routes, the next is its stand-by
        elif self.routing == "round_robin":
            turn = next(self._turns) % len(replicas)
            preferred = replicas[turn:] + replicas[:turn]
        else:
            preferred = rendezvous_order(passage_id, replicas)
        return variant, replica_order(preferred, healthy, waiting, self.max_waiting)


def gateway_headers(session_header: str, fairness_header: str, passage_id: str, classroom_id: str) -> dict[str, str]:
    """What a router in front of the GPUs keys on: the passage as the session (its questions hashed to one
    replica, where its prefix is cached) and the class as the fairness id (classes take turns)."""
    return {session_header: passage_id, fairness_header: classroom_id}
