"""The LLM proposer against misbehaving endpoints (a local fake server on 127.0.0.1): every failure is one
`ProposerError`, every bad proposal a noted problem, the key goes nowhere but the configured address, and a
whole tune ends with its results whatever the endpoint does."""

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paraplan.cli.main import app
from paraplan.errors import ConfigError
from paraplan.tune.proposer import API_KEY_ENV, LLMConfig, LLMProposer, ProposerError
from paraplan.tune.space import SearchSpace

KEY = "sk-test-SECRET-0123456789"
Behaviour = Callable[[BaseHTTPRequestHandler], None]
POLL_S = 0.02  # the fake endpoint's serving loop checks for shutdown this often


def _send(handler: BaseHTTPRequestHandler, body: bytes, status: int = 200, length: int | None = None) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body) if length is None else length))
    handler.end_headers()
    handler.wfile.write(body)


def _reply(content: object) -> bytes:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()


class _Server:
    """A fake endpoint: each POST runs `behaviour`; it records the headers it saw."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.headers_seen: list[dict[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.headers_seen.append(dict(self.headers))
                try:
                    server.behaviour(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout, size cap): expected

            do_GET = do_POST  # noqa: N815 - a client following a 302 turns the POST into a GET: seen all the same

            def log_message(self, *args: object) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        # shutdown() waits for the serving loop's next poll: 0.5 s by default, on every test's teardown
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(POLL_S,), daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[Behaviour], _Server]]:
    servers: list[_Server] = []

    def start(behaviour: Behaviour) -> _Server:
        servers.append(_Server(behaviour))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def _chat(url: str, timeout_s: float = 10.0, key: str | None = KEY) -> str:
    return LLMProposer(LLMConfig(url=url, model="m", api_key=key, timeout_s=timeout_s))._chat(
        [{"role": "user", "content": "hi"}]
    )


def test_a_redirect_is_not_followed_and_the_key_stays_home(serve) -> None:
    elsewhere = serve(lambda h: _send(h, _reply("[]")))

    def redirect(h: BaseHTTPRequestHandler) -> None:
        h.send_response(302)
        h.send_header("Location", elsewhere.url + "/chat/completions?token=abc")
        h.send_header("Content-Length", "0")
        h.end_headers()

    home = serve(redirect)
    with pytest.raises(ProposerError) as error:
        _chat(home.url)
    assert error.value.kind == "redirect" and error.value.endpoint_failed
    assert "302" in str(error.value) and "not followed" in str(error.value)
    assert "token=abc" not in str(error.value)  # a query may hold a credential: not repeated
    assert home.headers_seen[0]["Authorization"] == f"Bearer {KEY}"
    assert elsewhere.headers_seen == []  # never contacted, so never saw the key


@pytest.mark.parametrize(
    ("body", "kind", "fragment"),
    [
        (b'{"choices": null}', "reply shape", "'choices' is null"),
        (b"[1, 2, 3]", "reply shape", "JSON array"),
        (b"<html>502 Bad Gateway</html>", "reply not JSON", "not JSON"),
        (b"\xff\xfe\x00garbage", "reply not JSON", "not JSON"),
        (b'{"choices": []}', "reply shape", "non-empty array"),
        (b'{"choices": [{"message": {"content": 5}}]}', "reply shape", "got number"),
        (b'{"choices": [{"message": null}]}', "reply shape", "content"),
        (b'{"choices": ["text"]}', "reply shape", "content"),
        (b'{"error": {"message": "model not found"}}', "endpoint error", "model not found"),
        (b"[" * 100_000 + b"]" * 100_000, "reply not JSON", "not JSON"),
    ],
)
def test_malformed_replies_are_one_error_type(serve, body: bytes, kind: str, fragment: str) -> None:
    server = serve(lambda h: _send(h, body))
    with pytest.raises(ProposerError) as error:
        _chat(server.url)
    assert error.value.kind == kind
    assert fragment in str(error.value)


def test_a_truncated_body_is_an_error(serve) -> None:
    server = serve(lambda h: _send(h, _reply("[]")[:20], length=1000))
    with pytest.raises(ProposerError) as error:
        _chat(server.url)
    assert error.value.kind == "truncated reply" and "of 1,000 announced" in str(error.value)


def test_a_trickling_server_is_cut_off_at_the_deadline(serve) -> None:
    stop = threading.Event()

    def trickle(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", "100000")
        h.end_headers()
        while not stop.is_set():  # one byte every 0.3 s: each read succeeds, the whole never ends
            h.wfile.write(b" ")
            h.wfile.flush()
            time.sleep(0.3)

    server = serve(trickle)
    started = time.monotonic()
    with pytest.raises(ProposerError) as error:
        _chat(server.url, timeout_s=1.5)
    elapsed = time.monotonic() - started
    stop.set()
    assert error.value.kind == "timeout" and "1.5 s" in str(error.value)
    assert 1.4 <= elapsed < 1.5 + 2.0


def test_a_server_trickling_its_headers_is_cut_off_too(serve) -> None:
    stop = threading.Event()

    def trickle(h: BaseHTTPRequestHandler) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
            if stop.is_set():
                return
            h.wfile.write(bytes([byte]))
            h.wfile.flush()
            time.sleep(0.2)

    server = serve(trickle)
    started = time.monotonic()
    with pytest.raises(ProposerError) as error:
        _chat(server.url, timeout_s=1.0)
    stop.set()
    assert error.value.kind == "timeout"
    assert time.monotonic() - started < 1.0 + 2.0


def test_an_oversized_reply_is_refused(serve) -> None:
    announced = serve(lambda h: _send(h, b"{}", length=300_000_000))
    with pytest.raises(ProposerError) as error:
        _chat(announced.url)
    assert error.value.kind == "reply too large" and "300,000,000 bytes" in str(error.value)

    def unannounced(h: BaseHTTPRequestHandler) -> None:  # no Content-Length: read until the cap, then refused
        h.send_response(200)
        h.send_header("Connection", "close")
        h.end_headers()
        for _ in range(40):  # 40 x 64 KiB = 2.5 MiB
            h.wfile.write(b" " * 65536)

    streamed = serve(unannounced)
    with pytest.raises(ProposerError) as error:
        _chat(streamed.url)
    assert error.value.kind == "reply too large" and "stopped reading" in str(error.value)


def test_unreachable_and_http_errors(serve) -> None:
    with pytest.raises(ProposerError) as error:
        _chat("http://127.0.0.1:9/v1", timeout_s=2)
    assert error.value.kind in ("unreachable", "timeout") and error.value.endpoint_failed
    server = serve(lambda h: _send(h, json.dumps({"echo": h.headers["Authorization"]}).encode(), status=401))
    with pytest.raises(ProposerError) as error:
        _chat(server.url)
    assert error.value.kind == "HTTP error" and "401" in str(error.value)
    assert KEY not in str(error.value) and "***" in str(error.value)  # an endpoint echoing the key is scrubbed


@pytest.mark.parametrize(
    ("proposal", "fragment"),
    [
        ('{"tp": 1, "pp": 1, "dp": 1e999}', "not a finite number"),
        ('{"tp": 1, "pp": 1, "mbs": NaN}', "not a finite number"),
        ('{"tp": 123456789012345678901234567890}', "not a finite number"),
        ('{"tp": [1, 2]}', "a JSON array"),
        ('{"tp": {"x": 1}}', "a JSON object"),
        ('{"schedule": "' + "x" * 500 + '"}', "text of 500 characters"),
        ('{"tp": "banana"}', "bad value"),
        ('{"tp": 1, "pp": 1, "dp": "many"}', "invalid literal"),
        ('{"tp": 2, "pp": 1, "dp": 3}', "is not the GPU count"),
        ("7", "not an object"),
        ("null", "not an object"),
    ],
)
def test_malformed_proposals_are_problems_not_exceptions(dense_problem, monkeypatch, proposal, fragment) -> None:
    proposer = LLMProposer(LLMConfig(url="http://unused", model="m"))
    good = '{"tp": 2, "pp": 1, "mbs": 1}'
    monkeypatch.setattr(proposer, "_chat", lambda messages: f"[{proposal}, {good}]")
    candidates, problems = proposer.propose(SearchSpace(dense_problem), [])
    assert len(candidates) == 1 and candidates[0].tp == 2  # the good one survives its bad neighbour
    assert len(problems) == 1 and fragment in problems[0].message, problems
    assert not problems[0].endpoint_failed


def test_propose_never_raises_on_any_reply_text(dense_problem, monkeypatch) -> None:
    """Property: whatever text the model answers, propose returns (candidates, problems)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
    values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner))
    axes = st.sampled_from(["tp", "pp", "vpp", "cp", "ep", "etp", "dp", "mbs", "schedule", "recompute", "sp"])
    proposal = st.dictionaries(axes, values, max_size=6) | values
    space = SearchSpace(dense_problem)

    @settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(items=st.lists(proposal, max_size=5), wrap=st.sampled_from(["{}", "```json\n{}\n```", "Sure: {} ok"]))
    def check(items: list, wrap: str) -> None:
        proposer = LLMProposer(LLMConfig(url="http://unused", model="m"))
        text = wrap.format(json.dumps(items))
        proposer._chat = lambda messages: text  # type: ignore[method-assign]
        candidates, problems = proposer.propose(space, [])
        assert isinstance(candidates, list) and isinstance(problems, list)

    check()


def test_a_reply_of_backticks_is_not_quadratic(dense_problem, monkeypatch) -> None:
    proposer = LLMProposer(LLMConfig(url="http://unused", model="m"))
    monkeypatch.setattr(proposer, "_chat", lambda messages: "`" * 1_000_000)
    started = time.monotonic()
    candidates, problems = proposer.propose(SearchSpace(dense_problem), [])
    assert not candidates and problems[0].kind == "no proposals"
    assert time.monotonic() - started < 2.0


def test_llm_options_are_checked() -> None:
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="--llm-timeout"):
            LLMConfig.from_options("http://127.0.0.1:8000/v1", "m", bad)
    for url in ("http://", "http://[::1/v1", "http://host:99999/v1"):
        with pytest.raises(ConfigError, match="--llm-url"):
            LLMConfig.from_options(url, "m")
    assert LLMConfig.from_options("http://127.0.0.1:8000/v1", "m", 5.0).timeout_s == 5.0


def test_the_key_is_checked_and_never_shown(monkeypatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, "sk-with\nnewline")
    with pytest.raises(ConfigError) as error:
        LLMConfig.from_options("http://127.0.0.1:8000/v1", "m")
    assert "newline" not in str(error.value) and API_KEY_ENV in str(error.value)
    monkeypatch.setenv(API_KEY_ENV, KEY)
    config = LLMConfig.from_options("http://127.0.0.1:8000/v1", "m")
    assert config is not None and config.api_key == KEY and KEY not in repr(config)


RUNNER = CliRunner()
TUNE = ["tune", "--model", "llama3.1-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--gbs", "16", "--seq", "4096",
        "--max-pp", "4", "--max-cp", "2", "--max-mbs", "4", "--executor", "serial", "--method", "tpe",
        "--budget", "20", "--llm-model", "m"]  # fmt: skip


def test_a_whole_tune_against_a_misbehaving_endpoint(serve, monkeypatch, tmp_path: Path) -> None:
    """Each round gets a different bad reply; the tune ends with results, exit 0, and the key is nowhere."""
    pytest.importorskip("optuna", reason="the tpe search needs optuna (paraplan's 'tune' extra)")
    replies = iter(
        [
            b'{"choices": null}',
            _reply('[{"tp": 1, "dp": 1e999}, {"tp": [2]}, {"tp": 2, "pp": 2, "mbs": 1}, {"tp": 1, "dp": 1e999}]'),
            b"[]",
            _reply("no configurations today"),
        ]
    )
    server = serve(lambda h: _send(h, next(replies, b"{")))
    monkeypatch.setenv(API_KEY_ENV, KEY)
    study, csv = tmp_path / "study.db", tmp_path / "all.csv"
    args = [*TUNE, "--llm-url", server.url, "--llm-rounds", "5", "--json", "--study", str(study), "--csv", str(csv)]
    result = RUNNER.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["top"] and out["evaluated"] > 0
    notes = "\n".join(out["notes"])
    # one note per kind, with a count: the null choices and the array are both a bad reply shape; the 1e999s
    # and the list value are bad proposal values
    assert "'choices' is null, not a non-empty array (and 1 more like it)" in notes, notes
    assert "dp: inf is not a finite number up to 1,048,576 (and 2 more like it)" in notes, notes
    assert "no JSON array" in notes and "reply is not JSON" in notes
    assert len(out["notes"]) == 4, notes
    assert len(server.headers_seen) == 5  # malformed replies skip a round, they do not end the proposals
    for text in (result.stdout, result.stderr, study.read_bytes().decode("latin-1"), csv.read_text()):
        assert KEY not in text


def test_a_whole_tune_against_a_redirecting_or_silent_endpoint(serve, monkeypatch) -> None:
    pytest.importorskip("optuna", reason="the tpe search needs optuna (paraplan's 'tune' extra)")
    elsewhere = serve(lambda h: _send(h, _reply("[]")))

    def redirect(h: BaseHTTPRequestHandler) -> None:
        h.send_response(307)
        h.send_header("Location", elsewhere.url)
        h.end_headers()

    home = serve(redirect)
    monkeypatch.setenv(API_KEY_ENV, KEY)
    result = RUNNER.invoke(app, [*TUNE, "--llm-url", home.url, "--llm-rounds", "3", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["top"] and any("redirect" in n for n in out["notes"])
    assert len(home.headers_seen) == 1 and elsewhere.headers_seen == []  # a failed endpoint is not asked again

    stop = threading.Event()

    def silent(h: BaseHTTPRequestHandler) -> None:
        stop.wait(30)

    quiet = serve(silent)
    started = time.monotonic()
    result = RUNNER.invoke(app, [*TUNE, "--llm-url", quiet.url, "--llm-timeout", "1", "--json"])
    stop.set()
    assert result.exit_code == 0, result.output
    assert any("within 1 s" in n for n in json.loads(result.stdout)["notes"])
    assert time.monotonic() - started < 30
