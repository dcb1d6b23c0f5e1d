"""The LLM path: a recorded transcript replayed through the same parsing and checks as a live model's replies, and
the live transport's use (prompt content, failures logged, the key never written)."""

import json
import sqlite3
from pathlib import Path

import pytest

from paraplan.errors import ConfigError
from paraplan.tune.agent import AgentOptions, run_agent
from paraplan.tune.agent.diagnosis import diagnose
from paraplan.tune.agent.proposers.llm import ChatProposer, build_messages, llm_proposer, parse_reply
from paraplan.tune.agent.proposers.replay import read_transcript
from paraplan.tune.agent.starts import recipe_start
from paraplan.tune.proposer import LLMConfig, LLMProposer, ProposerError

TRANSCRIPT = [
    # 1: prose around a fenced list: one proposal kept (recompute is 23% of the step with 55 GiB free), one refused
    {"reply": 'Looking at the breakdown, recompute dominates.\n```json\n[{"hypothesis": "full recompute costs 23% of '
              'the step and 55 GiB are free: drop it", "changes": {"recompute_granularity": "none"}},\n'
              '{"hypothesis": "fp8 is faster", "changes": {"precision": "bf16"}}]\n```'},
    # 2: not JSON at all
    {"reply": "I would try a different pipeline schedule."},
    # 3: an illegal layout (the validator's rule) and a change of a field that does not exist
    {"reply": '[{"hypothesis": "tp 3", "changes": {"tp": 3}}, {"hypothesis": "x", "changes": {"colour": "red"}}]'},
    # 4: a bare object; over the memory at pp 1 without recompute? projected, judged
    {"hypothesis": "halve the pipeline: the bubble is 10% of the step", "changes": {"pp": 2}},
    # 5: a proposal without a hypothesis
    {"changes": {"mbs": 2}},
]  # fmt: skip


@pytest.fixture()
def transcript(tmp_path: Path) -> Path:
    path = tmp_path / "replies.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in TRANSCRIPT) + "\n")
    return path


def test_replayed_transcript_goes_through_every_check(mixtral_recipe: Path, transcript: Path) -> None:
    problem, start = recipe_start(mixtral_recipe, gpu="h100-sxm5-80gb")
    result = run_agent(problem, [start], AgentOptions(proposer="replay", transcript=str(transcript), budget=20))
    assert result.proposer == "replay"
    assert result.stopped == "the proposer has nothing more to propose"  # the transcript ran out
    by_round = {}
    for step in result.steps[1:]:
        by_round.setdefault(step.round, []).append(step)
    kept, refused = by_round[1]
    assert (
        kept.status == "kept" and kept.source == "llm" and kept.changes == {"recompute_granularity": ["full", "none"]}
    )
    assert kept.validator == "passed" and kept.memory_fits and "23%" in kept.hypothesis
    assert refused.status == "dropped" and refused.validator.startswith("refused: precision")
    (malformed,) = by_round[2]
    assert malformed.kind == "error" and malformed.status == "skipped" and "no JSON" in malformed.hypothesis
    illegal, unknown = by_round[3]
    assert illegal.reason == "illegal" and "divisible by tp 3" in illegal.validator
    assert unknown.validator.startswith("refused:") and "colour" in unknown.validator
    (pipeline,) = by_round[4]
    assert pipeline.changes["pipeline_model_parallel_size"] == [4, 2] and pipeline.validator == "passed"
    (nameless,) = by_round[5]
    assert nameless.kind == "error" and "hypothesis" in nameless.hypothesis
    assert result.best.step_time_s < result.start.step_time_s


def test_replay_resumes_where_the_transcript_left_off(mixtral_recipe: Path, transcript: Path, tmp_path: Path) -> None:
    problem, start = recipe_start(mixtral_recipe, gpu="h100-sxm5-80gb")
    study = str(tmp_path / "study.db")
    first = run_agent(problem, [start], AgentOptions(proposer="replay", transcript=str(transcript), budget=2,
                                                     study_path=study))  # fmt: skip
    assert first.proposals == 2 and first.stopped.startswith("budget")
    second = run_agent(problem, [start], AgentOptions(proposer="replay", transcript=str(transcript), budget=20,
                                                      study_path=study))  # fmt: skip
    assert second.resumed == len(first.steps)
    assert [s.to_dict() for s in second.steps[: len(first.steps)]] == [s.to_dict() for s in first.steps]
    assert {s.round for s in second.steps[len(first.steps) :]} == {2, 3, 4, 5}  # round 1's replies are not re-read
    assert second.best.step_time_s == first.best.step_time_s or second.best.step_time_s < first.best.step_time_s


def test_parse_reply_takes_objects_lists_and_fences() -> None:
    assert parse_reply('{"hypothesis": "h", "changes": {"vpp": 2}}')[0][0].changes == {"vpp": 2}
    proposals, problems = parse_reply('```\n[{"hypothesis": "a", "changes": {"mbs": 1}}, 3]\n```')
    assert len(proposals) == 1 and len(problems) == 1
    assert parse_reply('{"hypothesis": "h", "changes": {}}')[0] == []
    assert "malformed" in parse_reply('{"hypothesis": "h", "changes": {"vpp": 2}')[1][0]


def test_transcript_errors_are_config_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"reply": "ok"}\nnot json\n')
    with pytest.raises(ConfigError, match="line 2"):
        read_transcript(bad)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match="no replies"):
        read_transcript(empty)


SECRET = "sk-test-0123456789abcdef"


def test_live_transport_sees_the_breakdown_and_never_the_key(
    mixtral_recipe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem, start = recipe_start(mixtral_recipe, gpu="h100-sxm5-80gb")
    asked: list[list[dict[str, str]]] = []
    replies = iter(['{"hypothesis": "recompute is a quarter of the step", "changes": {"recompute": "selective"}}'])

    def chat(self: LLMProposer, messages: list[dict[str, str]]) -> str:
        assert self.config.api_key == SECRET  # the transport holds it; nothing else does
        asked.append(messages)
        try:
            return next(replies)
        except StopIteration:
            raise ProposerError("unreachable", f"connection refused (Authorization: Bearer {SECRET})") from None

    monkeypatch.setattr(LLMProposer, "_chat", chat)
    config = LLMConfig(url="http://127.0.0.1:9/v1", model="m", api_key=SECRET)
    study, record = tmp_path / "study.db", tmp_path / "replies.jsonl"
    options = AgentOptions(proposer="llm", llm=config, study_path=str(study), transcript=str(record), budget=10)
    result = run_agent(problem, [start], options)
    assert result.path and result.path[0].changes["recompute_granularity"] == ["full", "selective"]
    assert result.stopped == "the proposer has nothing more to propose"  # two failures in a row end it
    errors = [s for s in result.steps if s.kind == "error"]
    assert len(errors) == 2 and all("connection refused" in s.hypothesis and "***" in s.hypothesis for s in errors)
    user = json.loads(asked[0][1]["content"])
    assert "pipeline_bubble" in user["diagnosis"]["breakdown_s"] and user["current"]["pipeline_layout"] is None
    assert json.loads(asked[1][1]["content"])["log"][-1]["status"] == "kept"  # the second ask sees the first's verdict
    for text in (json.dumps(result.to_dict()), study.read_bytes().decode("latin-1"), record.read_text()):
        assert SECRET not in text
    with sqlite3.connect(study) as db:
        assert db.execute("SELECT count(*) FROM paraplan_agent_step").fetchone()[0] == len(result.steps)
    assert read_transcript(record) == ['{"hypothesis": "recompute is a quarter of the step", "changes": '
                                       '{"recompute": "selective"}}']  # fmt: skip


def test_prompt_holds_history_and_no_config(mixtral_recipe: Path) -> None:
    problem, start = recipe_start(mixtral_recipe, gpu="h100-sxm5-80gb")
    messages = build_messages(diagnose(problem, start.train), [])
    assert "JSON" in messages[0]["content"] and json.loads(messages[1]["content"])["log"] == []
    proposer = llm_proposer(LLMConfig(url="http://127.0.0.1:9", model="m", api_key=SECRET))
    assert proposer.secret == SECRET and proposer.record is None


def test_odd_replies_are_judged_not_crashed_on(mixtral_recipe: Path, tmp_path: Path) -> None:
    replies = [
        {"hypothesis": "negative layers", "changes": {"pipeline_layout": [-1] * 31 + [63]}},
        {"hypothesis": "a word for a count", "changes": {"tp": "two"}},
        {"hypothesis": "a huge vpp", "changes": {"vpp": 100000}},
        {"hypothesis": "what it already is", "changes": {"recompute_num_layers": None}},
        {"hypothesis": "an unknown dispatcher", "changes": {"moe_token_dispatcher_type": "deepep"}},
    ]
    path = tmp_path / "odd.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in replies))
    problem, start = recipe_start(mixtral_recipe, gpu="h100-sxm5-80gb")
    result = run_agent(problem, [start], AgentOptions(proposer="replay", transcript=str(path)))
    negative, word, huge, same, dispatcher = result.steps[1:]
    assert negative.reason == "illegal" and ">= 0" in negative.validator
    assert word.validator.startswith("refused:") and "must be an integer" in word.validator
    assert huge.reason == "illegal" and "model stages" in huge.validator
    assert same.status == "skipped" and same.reason == "already judged at #0"
    assert dispatcher.reason == "illegal" and "deepep" in dispatcher.validator
    assert result.proposals == 4 and not result.path


def test_a_transport_failure_is_logged_and_the_run_goes_on(mixtral_recipe: Path) -> None:
    """The transport raises `ProposerError` for every failure (`LLMProposer._chat`): the round logs it and the next
    round asks again; any other exception is a bug and is not swallowed."""
    problem, start = recipe_start(mixtral_recipe, gpu="h100-sxm5-80gb")
    calls = iter(
        [ProposerError("timeout", "LLM endpoint http://127.0.0.1:9: no complete reply within 60 s"),
         '{"hypothesis": "recompute is a quarter of the step", "changes": {"recompute": "selective"}}']
    )  # fmt: skip

    def chat(messages: list[dict[str, str]]) -> str:
        item = next(calls)
        if isinstance(item, Exception):
            raise item
        return item

    result = run_agent(problem, [start], AgentOptions(budget=5), proposer=ChatProposer(chat))
    error, kept = result.steps[1], result.path[0]
    assert error.kind == "error" and error.round == 1 and "(timeout)" in error.hypothesis and error.reason
    assert kept.round == 2 and kept.changes["recompute_granularity"] == ["full", "selective"]
    assert "LLM call failed (timeout)" in "\n".join(result.log_lines())

    def broken(messages: list[dict[str, str]]) -> str:
        raise KeyError("a bug, not a transport failure")

    with pytest.raises(KeyError):
        run_agent(problem, [start], AgentOptions(budget=5), proposer=ChatProposer(broken))
