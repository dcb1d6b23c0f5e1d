"""A language model as the agent's proposer, behind any OpenAI-compatible chat endpoint.

Each round it is shown the model, the cluster, the incumbent's full training spec, its breakdown (where the step's
time goes), memory and stages, and the log so far, and asked for JSON: `{"hypothesis": ..., "changes": {field:
value}}` or a list of them. The transport is `tune.proposer.LLMProposer._chat` (the endpoint, the key from
`PARAPLAN_LLM_API_KEY`); nothing is contacted unless a URL is configured. The key is never put in a prompt, a log
line, the study file or an error text. A reply that holds no such JSON is logged and skipped; a failed call (a
`ProposerError`, the only exception the transport raises) is logged and the run goes on. Anything else is a bug in
paraplan and is raised.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from paraplan.errors import ConfigError
from paraplan.tune.agent.changes import FIXED_FIELDS, spec_to_json
from paraplan.tune.agent.diagnosis import Diagnosis
from paraplan.tune.agent.proposers import Proposal, ProposalRound
from paraplan.tune.proposer import API_KEY_ENV, LLMConfig, LLMProposer, ProposerError

URL_ENV = "PARAPLAN_LLM_URL"
MODEL_ENV = "PARAPLAN_LLM_MODEL"
HISTORY_STEPS = 24
"""The latest steps shown to the model (the prompt stays a few thousand tokens)."""
MAX_FAILURES = 2
"""Endpoint failures in a row after which the agent stops asking."""
REPLY_EXCERPT = 2000
"""Characters of a reply kept in the log."""

SYSTEM_PROMPT = (
    "You are a performance engineer tuning a Megatron-style LLM training job. You are given the current best "
    "configuration (every TrainingSpec field), its projected step time broken into named parts that sum to the step "
    "(pipeline bubble, exposed communication by kind, recompute, host launch waits, ...), its memory against the "
    "usable HBM, the busy time of each pipeline stage, and the log of what was tried. Form one hypothesis about "
    "where time can be saved and propose the field changes that test it. Reply with JSON only: "
    '{"hypothesis": "...", "changes": {"field": value, ...}} or a list of up to 3 such objects. Fields not '
    f"to change: {', '.join(FIXED_FIELDS)}. pipeline_layout is the decoder layers per model stage in model order."
)


def config_from(url: str | None, model: str | None, timeout_s: float = 60.0) -> LLMConfig:
    """The endpoint from the flags, else from $PARAPLAN_LLM_URL / $PARAPLAN_LLM_MODEL; ConfigError when neither."""
    config = LLMConfig.from_options(url or os.environ.get(URL_ENV), model or os.environ.get(MODEL_ENV), timeout_s)
    if config is None:
        raise ConfigError(
            f"--agent-proposer llm needs an endpoint: --llm-url and --llm-model (or ${URL_ENV} and ${MODEL_ENV}); "
            f"the key comes from ${API_KEY_ENV}"
        )
    return config


def build_messages(incumbent: Diagnosis, history: Sequence[Any]) -> list[dict[str, str]]:
    model, system = incumbent.model, incumbent.system
    user = {
        "model": {
            "name": model.name,
            "layers": model.num_layers,
            "hidden": model.hidden_size,
            "heads": model.num_attention_heads,
            "experts": model.num_experts,
        },
        "gpu": system.gpu.name,
        "gpus": system.num_gpus,
        "gpus_per_node": system.gpus_per_node,
        "current": spec_to_json(incumbent.train),
        "diagnosis": incumbent.summary(),
        "log": [
            {
                "step": s.index,
                "hypothesis": s.hypothesis,
                "changes": s.requested,
                "status": s.status,
                "reason": s.reason,
                "step_time_s": s.step_time_s,
            }
            for s in list(history)[-HISTORY_STEPS:]
        ],
    }
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": json.dumps(user, default=str)}]


def parse_reply(text: str) -> tuple[list[Proposal], list[str]]:
    """(proposals, problems) from a reply: a JSON object or list, bare or in a ```json fence."""
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    body = (fenced.group(1) if fenced else text).strip()
    starts = [i for i in (body.find("{"), body.find("[")) if i >= 0]
    if not starts:
        return [], [f"reply held no JSON: {text[:200]!r}"]
    start = min(starts)
    end = body.rfind("}" if body[start] == "{" else "]")
    try:
        data = json.loads(body[start : end + 1])
    except json.JSONDecodeError as exc:
        return [], [f"reply's JSON is malformed ({exc.msg}): {text[:200]!r}"]
    items = data if isinstance(data, list) else [data]
    proposals: list[Proposal] = []
    problems: list[str] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("changes"), dict) or not item["changes"]:
            problems.append(f"not a proposal (needs a non-empty 'changes' object): {str(item)[:200]}")
            continue
        hypothesis = item.get("hypothesis")
        if not isinstance(hypothesis, str) or not hypothesis.strip():
            problems.append(f"proposal without a hypothesis: {str(item)[:200]}")
            continue
        proposals.append(Proposal(hypothesis.strip(), dict(item["changes"]), "llm"))
    return proposals, problems


class ChatProposer:
    """Asks a chat function (the endpoint, or a transcript) once per round."""

    name = "llm"

    def __init__(
        self, chat: Callable[[list[dict[str, str]]], str], secret: str | None = None, record: Path | None = None
    ) -> None:
        self.chat = chat
        self.secret = secret
        self.record = record
        self.failures = 0

    def _redact(self, text: str) -> str:
        return text.replace(self.secret, "***") if self.secret else text

    def propose(self, incumbent: Diagnosis, history: Sequence[Any]) -> ProposalRound:
        try:
            reply = self.chat(build_messages(incumbent, history))
        except StopIteration:
            return ProposalRound(exhausted=True)
        except ProposerError as exc:  # the transport's every failure (`LLMProposer._chat`): logged, never a crash
            self.failures += 1
            message = self._redact(f"LLM call failed ({exc.kind}): {exc}")
            return ProposalRound(problems=[message], exhausted=self.failures >= MAX_FAILURES)
        self.failures = 0
        if self.record is not None:
            with self.record.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"reply": reply}) + "\n")
        proposals, problems = parse_reply(reply)
        return ProposalRound(proposals, [self._redact(p) for p in problems])

    def skip_rounds(self, rounds: int) -> None:
        """A live model has no position to skip to: it is asked afresh with the log so far."""


def llm_proposer(config: LLMConfig, record: str | None = None) -> ChatProposer:
    """The live proposer; `record`: append each reply to this JSONL file (a transcript to replay)."""
    transport = LLMProposer(config)
    return ChatProposer(transport._chat, config.api_key, Path(record) if record else None)
