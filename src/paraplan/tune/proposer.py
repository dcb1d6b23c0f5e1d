"""An optional proposer: ask a language model for cross-axis candidates, given what was evaluated so far.

Any OpenAI-compatible chat-completions endpoint works (a hosted API, vLLM, llama.cpp, Ollama): the user gives
its URL and model name, and the key comes from the environment (`PARAPLAN_LLM_API_KEY`). Nothing is contacted
unless a URL is configured. Proposals are only suggestions: every one goes through the space's constraints,
the validator and the memory filter like any other candidate.

The endpoint is untrusted: one POST per round over `http.client` (standard library), which follows no
redirect (a 3xx is an error, so the key is only ever sent to the configured address), with a wall-clock
deadline over the whole exchange (connect, headers and body; a server that trickles bytes is cut off) and a
cap on the reply's size. Every failure is a `ProposerError`; a malformed proposal is a `Problem`; neither
ends the tune. The key appears in no message, note or repr.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field

from paraplan.errors import ConfigError
from paraplan.tune.candidate import Candidate
from paraplan.tune.evaluate import Evaluation
from paraplan.tune.space import SearchSpace

API_KEY_ENV = "PARAPLAN_LLM_API_KEY"
PROPOSAL_AXES = (
    "tp", "pp", "vpp", "cp", "ep", "etp", "mbs", "schedule", "recompute", "sharding", "sp", "precision",
)  # fmt: skip
DEFAULT_TIMEOUT_S = 60.0
MAX_REPLY_BYTES = 1 << 20
"""1 MiB: a reply with a few dozen configurations is a few KiB; anything far larger is refused unread."""
READ_CHUNK_BYTES = 64 << 10
MAX_AXIS_NUMBER = 1 << 20
"""Largest number a proposal may give an axis (parallel degrees and batch sizes are far below it)."""
MAX_AXIS_TEXT = 64
SNIPPET_CHARS = 200
"""Characters of an error reply's body quoted in the note."""


class ProposerError(Exception):
    """A failed or malformed exchange with the endpoint. `kind` names what went wrong (the tuner notes each kind
    once); `endpoint_failed`: the endpoint itself failed (unreachable, timeout, redirect, HTTP error), so asking it
    again is pointless, against a reply that was only malformed this time."""

    def __init__(self, kind: str, message: str, endpoint_failed: bool = True) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.endpoint_failed = endpoint_failed


@dataclass(frozen=True)
class Problem:
    """One thing the tuner notes about a round: `kind` groups alike problems (noted once, with a count)."""

    kind: str
    message: str
    endpoint_failed: bool = False


@dataclass(frozen=True)
class LLMConfig:
    url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    """From $PARAPLAN_LLM_API_KEY; sent only to `url` and never printed (no repr)."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    """Wall-clock limit of one request: connect, send and read the whole reply."""
    proposals_per_round: int = 8
    max_reply_bytes: int = MAX_REPLY_BYTES

    @classmethod
    def from_options(cls, url: str | None, model: str | None, timeout_s: float = DEFAULT_TIMEOUT_S) -> LLMConfig | None:
        if not url:
            if model:
                raise ConfigError("--llm-model needs --llm-url (an OpenAI-compatible endpoint)")
            return None
        problems = []
        if not url.startswith(("http://", "https://")) or not _has_host(url):
            problems.append(f"--llm-url must be an http(s) URL with a host (got '{_safe_url(url)}')")
        if not model:
            problems.append("--llm-url needs --llm-model (the model name the endpoint serves)")
        if not 0 < timeout_s < math.inf:  # NaN fails too
            problems.append(f"--llm-timeout must be a number of seconds > 0 (got {timeout_s})")
        key = os.environ.get(API_KEY_ENV) or None
        if key is not None and not (key.isascii() and key.isprintable() and not any(ch.isspace() for ch in key)):
            # RFC 9110 5.5: a header value is visible ASCII; the key itself is not shown
            problems.append(f"${API_KEY_ENV} holds spaces, line breaks or non-ASCII characters: not a usable key")
        if problems:
            raise ConfigError(problems)
        assert model is not None
        return cls(url=url, model=model, api_key=key, timeout_s=timeout_s)

    @property
    def endpoint(self) -> str:
        url = self.url.rstrip("/")
        return url if url.endswith("/chat/completions") else f"{url}/chat/completions"


def _has_host(url: str) -> bool:
    try:
        parts = urllib.parse.urlsplit(url)
        return bool(parts.hostname) and (parts.port is None or parts.port > 0)
    except ValueError:  # a bad port or IPv6 literal
        return False


def _safe_url(url: str) -> str:
    """The URL without user:password@ and without a query (either may hold a credential)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(unparsable URL)"
    return urllib.parse.urlunsplit((parts.scheme, host + port, parts.path, "", ""))


def _json_type(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _snippet(data: bytes | str) -> str:
    """The start of an untrusted text, printable and short."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    text = "".join(ch if ch.isprintable() else " " for ch in text[:SNIPPET_CHARS])
    return repr(text) + ("..." if len(data) > SNIPPET_CHARS else "")


class _Watchdog:
    """Shuts the socket down at the deadline, which ends a blocked read at once: the socket's own timeout bounds
    each read, not their sum, so a server sending a byte every few seconds would otherwise never time out."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.fired = False
        self._timer: threading.Timer | None = None

    def arm(self, sock: socket.socket | None) -> None:
        if sock is None:
            return

        def fire() -> None:
            self.fired = True
            try:  # the plain socket's shutdown, under any TLS wrapper: the fd stops, the reader wakes with EOF
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass

        self._timer = threading.Timer(max(0.0, self.deadline - time.monotonic()), fire)
        self._timer.daemon = True
        self._timer.start()

    def expired(self) -> bool:
        return self.fired or time.monotonic() >= self.deadline

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _read_capped(response: http.client.HTTPResponse, max_bytes: int, watchdog: _Watchdog) -> bytes:
    """The body in chunks, refused beyond `max_bytes`; a body shorter than its Content-Length is an error."""
    declared = response.getheader("Content-Length", "")
    if declared.strip().isdigit() and int(declared) > max_bytes:
        raise ProposerError(
            "reply too large", f"reply of {int(declared):,} bytes is over the {max_bytes:,}-byte cap: not read"
        )
    chunks: list[bytes] = []
    size = 0
    while not watchdog.expired():
        chunk = response.read1(READ_CHUNK_BYTES)
        if not chunk:
            break
        size += len(chunk)
        if size > max_bytes:
            raise ProposerError("reply too large", f"reply over the {max_bytes:,}-byte cap: stopped reading")
        chunks.append(chunk)
    if watchdog.expired():
        raise TimeoutError
    if response.length:  # bytes announced but never sent
        raise ProposerError(
            "truncated reply", f"reply truncated: {size:,} of {size + response.length:,} announced bytes", False
        )
    return b"".join(chunks)


def _post(url: str, body: bytes, headers: dict[str, str], timeout_s: float, max_bytes: int) -> bytes:
    """POST `body` and return the reply's body: no redirect followed, `timeout_s` over the whole exchange."""
    try:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ProposerError("bad URL", f"unusable URL ({exc})") from None
    if not host:
        raise ProposerError("bad URL", "the URL has no host")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        try:
            context = ssl.create_default_context()
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError: unreadable system certificates
            raise ProposerError("TLS setup", f"no TLS context ({type(exc).__name__}: {exc})") from None
        connection = http.client.HTTPSConnection(host, port, timeout=timeout_s, context=context)
    else:
        connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
    watchdog = _Watchdog(time.monotonic() + timeout_s)
    try:
        connection.connect()  # bounded by the socket timeout; the watchdog covers everything after
        watchdog.arm(connection.sock)
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        if 300 <= response.status < 400:
            location = _safe_url(response.getheader("Location", "") or "") or "(no Location)"
            raise ProposerError(
                "redirect",
                f"answered HTTP {response.status}, a redirect to {location}: not followed (the key is sent to the "
                "configured address only); give the final address as --llm-url",
            )
        if not 200 <= response.status < 300:
            text = response.read1(SNIPPET_CHARS) if not watchdog.expired() else b""
            raise ProposerError("HTTP error", f"HTTP {response.status} {response.reason}: {_snippet(text)}")
        return _read_capped(response, max_bytes, watchdog)
    except ProposerError:
        raise
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if watchdog.expired() or isinstance(exc, TimeoutError):
            raise ProposerError("timeout", f"no complete reply within {timeout_s:g} s") from None
        raise ProposerError("unreachable", f"{type(exc).__name__}: {exc}") from None
    finally:
        watchdog.cancel()
        connection.close()


def _content_of(raw: bytes) -> str:
    """The assistant's text in an OpenAI chat-completions reply: choices[0].message.content."""
    try:
        reply = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ProposerError(
            "reply not JSON", f"reply is not JSON ({type(exc).__name__}): {_snippet(raw)}", False
        ) from None
    if not isinstance(reply, dict):
        raise ProposerError("reply shape", f"reply is a JSON {_json_type(reply)}, not an object with 'choices'", False)
    if "choices" not in reply and "error" in reply:
        raise ProposerError("endpoint error", f"the endpoint answered an error: {_snippet(json.dumps(reply['error']))}")
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ProposerError("reply shape", f"reply 'choices' is {_json_type(choices)}, not a non-empty array", False)
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str):
        raise ProposerError(
            "reply shape", f"reply has no text at choices[0].message.content (got {_json_type(content)})", False
        )
    return content


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


def _json_array(text: str) -> list | None:
    """The JSON array in a reply (bare, or inside a ```json fence), or None. Plain string search: a regular
    expression over a reply of backticks would take quadratic time."""
    body = text
    fence = text.find("```")
    if fence >= 0:
        close = text.find("```", fence + 3)
        body = text[fence + 3 : close if close >= 0 else len(text)].removeprefix("json")
    start, end = body.find("["), body.rfind("]")
    if start < 0 or end <= start:
        return None
    try:
        data = json.loads(body[start : end + 1])
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, list) else None


def parse_proposals(text: str) -> list[dict[str, object]]:
    """The JSON array in a reply (bare, or inside a ```json fence); objects only."""
    return [item for item in _json_array(text) or [] if isinstance(item, dict)]


def _value_problem(values: dict[str, object]) -> str:
    """Why a proposal's values cannot be axis values ("" when they can): numbers finite and in range, short text."""
    for axis, value in values.items():
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            if not (math.isfinite(value) and abs(value) <= MAX_AXIS_NUMBER):
                return f"{axis}: {value!r} is not a finite number up to {MAX_AXIS_NUMBER:,}"[:SNIPPET_CHARS]
        elif isinstance(value, str):
            if len(value) > MAX_AXIS_TEXT:
                return f"{axis}: text of {len(value):,} characters (at most {MAX_AXIS_TEXT})"
        else:
            return f"{axis}: a JSON {_json_type(value)}, expected a number, text or true/false"
    return ""


class LLMProposer:
    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self.timeout_s: float | None = None
        """This request's limit when shorter than the config's (what is left of the tune's time limit)."""

    def _scrub(self, text: str) -> str:
        key = self.config.api_key
        return text.replace(key, "***") if key else text

    def _chat(self, messages: list[dict[str, str]]) -> str:
        """One chat completion: the assistant's text. Raises `ProposerError` (and nothing else) on any failure."""
        config = self.config
        body = json.dumps({"model": config.model, "messages": messages, "temperature": 0.2}).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json", "Connection": "close"}
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        try:
            timeout_s = min(config.timeout_s, self.timeout_s or math.inf)
            raw = _post(config.endpoint, body, headers, timeout_s, config.max_reply_bytes)
            return _content_of(raw)
        except ProposerError as exc:
            message = self._scrub(f"LLM endpoint {_safe_url(config.endpoint)}: {exc.message}")
            raise ProposerError(exc.kind, message, exc.endpoint_failed) from None

    def propose(
        self, space: SearchSpace, history: Sequence[Evaluation], timeout_s: float | None = None
    ) -> tuple[list[Candidate], list[Problem]]:
        """(candidates, problems): a failed call or a malformed proposal is a problem, never an exception.
        `timeout_s`: a limit for this request shorter than the config's."""
        n = self.config.proposals_per_round
        self.timeout_s = timeout_s
        try:
            text = self._chat(build_messages(space, history, n))
        except ProposerError as exc:
            return [], [Problem(exc.kind, exc.message, exc.endpoint_failed)]
        items = _json_array(text)
        if items is None:
            return [], [Problem("no proposals", "LLM reply held no JSON array of configurations")]
        candidates: list[Candidate] = []
        problems: list[Problem] = []
        for item in items[: 2 * n]:
            shown = _snippet(json.dumps(item))
            if not isinstance(item, dict):
                problems.append(Problem("proposal shape", f"LLM proposal {shown}: not an object of axis values"))
                continue
            values = {k: v for k, v in item.items() if (k in PROPOSAL_AXES or k == "dp") and v is not None}
            bad = _value_problem(values)
            if bad:
                problems.append(Problem("proposal value", f"LLM proposal {shown}: {bad}"))
                continue
            try:
                candidates.append(space.candidate_from_mapping(values))
            except ConfigError as exc:
                problems.append(Problem("proposal rejected", f"LLM proposal {shown}: {'; '.join(exc.problems)}"))
            except (TypeError, ValueError, ArithmeticError) as exc:
                problems.append(Problem("proposal rejected", f"LLM proposal {shown}: {exc}"))
        if len(items) > 2 * n:
            problems.append(
                Problem("too many proposals", f"LLM reply held {len(items):,} proposals: the first {2 * n} used")
            )
        if not candidates and not problems:
            problems.append(Problem("no proposals", "LLM reply held an empty array"))
        return candidates, [Problem(p.kind, self._scrub(p.message), p.endpoint_failed) for p in problems]
