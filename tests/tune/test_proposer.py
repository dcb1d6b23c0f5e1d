import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from paraplan.errors import ConfigError
from paraplan.tune.proposer import API_KEY_ENV, LLMConfig, LLMProposer, parse_proposals
from paraplan.tune.space import SearchSpace
from paraplan.tune.tuner import TuneOptions, tune

NO_OPTUNA = "optuna is not installed (paraplan's 'tune' extra): the LLM proposer runs inside the tpe search"

PROPOSALS = [
    {"tp": 2, "pp": 2, "vpp": 2, "cp": 1, "mbs": 1, "schedule": "interleaved", "recompute": "selective",
     "sharding": "dist_opt", "sp": True, "precision": "bf16"},  # legal, fits
    {"tp": 3, "pp": 1, "mbs": 1},  # illegal: 32 heads are not divisible by 3
    {"tp": 1, "pp": 1, "mbs": 16, "recompute": "none", "sharding": "ddp"},  # does not fit
    {"tp": 1, "pp": 1, "mbs": 1, "warp_drive": 9},  # unknown axis is dropped; the rest is a candidate
]  # fmt: skip


class _StubLLM(BaseHTTPRequestHandler):
    requests: list[dict] = []
    headers_seen: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        type(self).headers_seen.append(dict(self.headers))
        reply = {"choices": [{"message": {"role": "assistant", "content": f"```json\n{json.dumps(PROPOSALS)}\n```"}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def stub_url() -> Iterator[str]:
    _StubLLM.requests, _StubLLM.headers_seen = [], []
    server = HTTPServer(("127.0.0.1", 0), _StubLLM)
    # shutdown() waits for the serving loop's next poll (0.5 s by default)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_proposals_go_through_legality_and_memory(dense_problem, dense_limits, stub_url, monkeypatch) -> None:
    pytest.importorskip("optuna", reason=NO_OPTUNA)
    monkeypatch.setenv(API_KEY_ENV, "sk-test")
    llm = LLMConfig.from_options(stub_url, "stub-model")
    result = tune(
        dense_problem, dense_limits, TuneOptions(executor="serial", method="tpe", budget=30, llm=llm, llm_rounds=1)
    )
    assert len(_StubLLM.requests) == 1
    request = _StubLLM.requests[0]
    assert request["model"] == "stub-model"
    assert _StubLLM.headers_seen[0]["Authorization"] == "Bearer sk-test"
    prompt = json.loads(request["messages"][1]["content"])
    assert prompt["history_best_first"] and prompt["global_batch"] == 16
    from_llm = [e for e in result.evaluations if e.source == "llm"]
    assert any(e.candidate.tp == 2 and e.candidate.vpp == 2 and e.candidate.recompute == "selective" for e in from_llm)
    assert not any(e.candidate.tp == 3 for e in result.evaluations)
    assert any("tp 3" in n or "heads" in n for n in result.notes)
    assert all(e.fits for e in result.top)


def test_unreachable_endpoint_is_a_note_not_a_crash(dense_problem, dense_limits) -> None:
    pytest.importorskip("optuna", reason=NO_OPTUNA)
    llm = LLMConfig(url="http://127.0.0.1:9", model="m", timeout_s=2)
    result = tune(dense_problem, dense_limits, TuneOptions(executor="serial", method="tpe", budget=20, llm=llm))
    assert result.top
    assert any("LLM endpoint" in n for n in result.notes)


def test_nothing_is_contacted_unless_configured() -> None:
    assert LLMConfig.from_options(None, None) is None
    with pytest.raises(ConfigError):
        LLMConfig.from_options(None, "some-model")
    with pytest.raises(ConfigError):
        LLMConfig.from_options("ftp://x", "m")
    with pytest.raises(ConfigError):
        LLMConfig.from_options("http://localhost:8000/v1", None)


def test_parse_and_propose_offline(dense_problem, monkeypatch) -> None:
    assert parse_proposals("no json here") == []
    assert parse_proposals('Sure: [{"tp": 2}] done') == [{"tp": 2}]
    proposer = LLMProposer(LLMConfig(url="http://unused", model="m"))
    monkeypatch.setattr(proposer, "_chat", lambda messages: json.dumps(PROPOSALS))
    candidates, problems = proposer.propose(SearchSpace(dense_problem), [])
    assert len(candidates) == 4
    assert problems == []
