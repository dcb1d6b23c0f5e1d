"""An optional proposer: ask a language model for cross-axis candidates, given what was evaluated so far.

Any OpenAI-compatible chat-completions endpoint works (a hosted API, vLLM, llama.cpp, Ollama): the user gives
its URL and model name, and the key comes from the environment (`PARAPLAN_LLM_API_KEY`). Nothing is contacted
unless a URL is configured. Proposals are only suggestions: every one goes through the space's constraints,
the validator and the memory filter like any other candidate. Uses urllib from the standard library.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

from paraplan.errors import ConfigError
from paraplan.tune.candidate import Candidate
from paraplan.tune.evaluate import Evaluation
from paraplan.tune.space import SearchSpace

API_KEY_ENV = "PARAPLAN_LLM_API_KEY"
PROPOSAL_AXES = (
    "tp", "pp", "vpp", "cp", "ep", "etp", "mbs", "schedule", "recompute", "sharding", "sp", "precision",
)  # fmt: skip


@dataclass(frozen=True)
class LLMConfig:
    url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 60.0
    proposals_per_round: int = 8

    @classmethod
    def from_options(cls, url: str | None, model: str | None, timeout_s: float = 60.0) -> LLMConfig | None:
        if not url:
            if model:
                raise ConfigError("--llm-model needs --llm-url (an OpenAI-compatible endpoint)")
            return None
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"--llm-url must be an http(s) URL (got '{url}')")
        if not model:
            raise ConfigError("--llm-url needs --llm-model (the model name the endpoint serves)")
        return cls(url=url, model=model, api_key=os.environ.get(API_KEY_ENV) or None, timeout_s=timeout_s)

    @property
    def endpoint(self) -> str:
        url = self.url.rstrip("/")
        return url if url.endswith("/chat/completions") else f"{url}/chat/completions"


def _row(e: Evaluation) -> dict[str, object]:
    c = e.candidate
    return {
        "tp": c.tp,
        "pp": c.pp,
        "vpp": c.vpp,
        "cp": c.cp,
        "ep": c.ep,
        "etp": c.etp,
        "dp": c.dp,
        "mbs": c.mbs,
        "schedule": c.schedule,
        "recompute": c.recompute_label,
        "sharding": c.sharding,
        "sp": c.sp,
        "precision": c.precision,
        "step_time_s": round(e.step_time_s, 4),
        "tokens_per_sec_per_gpu": round(e.tokens_per_sec_per_gpu, 1),
        "peak_gib": round(e.peak_gib, 2),
        "fits": e.fits,
    }


def build_messages(space: SearchSpace, history: Sequence[Evaluation], n: int) -> list[dict[str, str]]:
    problem = space.problem
    model = problem.model
    system = problem.systems[0]
    axes = {
        "tp": space.tp_values(),
        "pp": space.pp_values(),
        "cp": space.cp_values(),
        "mbs": space.mbs_values(),
        "ep": space.ep_values(),
        "schedule": sorted({s for _, s, _ in space.axis_values("pipeline", None)}),  # type: ignore[arg-type]
        "recompute": ["none", "selective", "full", "full:N (N layers per model chunk)"],
        "sharding": space.sharding_values(),
        "sp": [True, False],
        "precision": space.precision_values(),
    }
    system_prompt = (
        "You propose parallel training configurations for Megatron-style LLM training. "
        "Answer with a JSON array only: each element an object with keys "
        f"{', '.join(PROPOSAL_AXES)}. dp is derived as GPUs / (tp*pp*cp). Propose configurations that are "
        "not in the history and that combine axes differently from the best ones."
    )
    user = {
        "model": {
            "name": model.name,
            "layers": model.num_layers,
            "hidden": model.hidden_size,
            "heads": model.num_attention_heads,
            "kv_groups": model.kv_groups,
            "experts": model.num_experts,
        },
        "gpu": system.gpu.name,
        "gpus": list(problem.gpu_counts),
        "gpus_per_node": system.gpus_per_node,
        "global_batch": problem.gbs,
        "seq_length": problem.seq,
        "allowed_values": axes,
        "history_best_first": [_row(e) for e in history],
        "wanted": n,
    }
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": json.dumps(user)}]


def parse_proposals(text: str) -> list[dict[str, object]]:
    """The JSON array in a reply (bare, or inside a ```json fence); objects only."""
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    body = fenced.group(1) if fenced else text
    start, end = body.find("["), body.rfind("]")
    if start < 0 or end <= start:
        return []
    try:
        data = json.loads(body[start : end + 1])
    except json.JSONDecodeError:
        return []
    return [item for item in data if isinstance(item, dict)]


class LLMProposer:
    def __init__(self, config: LLMConfig) -> None:
        self.config = config

    def _chat(self, messages: list[dict[str, str]]) -> str:
        body = json.dumps({"model": self.config.model, "messages": messages, "temperature": 0.2}).encode()
        headers = {"Content-Type": "application/json"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        request = urllib.request.Request(self.config.endpoint, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
            reply = json.loads(response.read().decode())
        return str(reply["choices"][0]["message"]["content"])

    def propose(self, space: SearchSpace, history: Sequence[Evaluation]) -> tuple[list[Candidate], list[str]]:
        """(candidates, problems): a failed call or a malformed proposal is a problem line, never an exception."""
        n = self.config.proposals_per_round
        try:
            text = self._chat(build_messages(space, history, n))
        except (urllib.error.URLError, TimeoutError, OSError, KeyError, IndexError, ValueError) as exc:
            return [], [f"LLM endpoint {self.config.endpoint}: {exc}"]
        candidates: list[Candidate] = []
        problems: list[str] = []
        for item in parse_proposals(text)[: 2 * n]:
            values = {k: v for k, v in item.items() if k in PROPOSAL_AXES or k == "dp"}
            try:
                candidates.append(space.candidate_from_mapping(values))
            except ConfigError as exc:
                problems.append(f"LLM proposal {values}: {'; '.join(exc.problems)}")
            except (TypeError, ValueError) as exc:
                problems.append(f"LLM proposal {values}: {exc}")
        if not candidates and not problems:
            problems.append("LLM reply held no JSON array of configurations")
        return candidates, problems
