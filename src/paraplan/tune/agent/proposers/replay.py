"""A recorded transcript of the language model's replies, fed back as its replies: the LLM path without a
network (tests, and re-running a session to audit it).

The transcript is JSON Lines, one reply per line: `{"reply": "<the model's text>"}` (what `--agent-transcript`
records from a live run), a JSON string (the text itself), or a proposal object or list written directly.
"""

from __future__ import annotations

import json
from pathlib import Path

from paraplan.errors import ConfigError
from paraplan.textfiles import read_text_file
from paraplan.tune.agent.proposers.llm import ChatProposer


def read_transcript(path: str | Path) -> list[str]:
    text = read_text_file(Path(path), "--agent-transcript")
    replies: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--agent-transcript {path} line {number}: not JSON ({exc.msg})") from None
        if isinstance(item, dict) and "reply" in item:
            replies.append(str(item["reply"]))
        elif isinstance(item, str):
            replies.append(item)
        else:
            replies.append(json.dumps(item))
    if not replies:
        raise ConfigError(f"--agent-transcript {path}: no replies")
    return replies


class ReplayProposer(ChatProposer):
    name = "replay"

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.position = 0
        super().__init__(self._next)

    def _next(self, messages: list[dict[str, str]]) -> str:
        if self.position >= len(self.replies):
            raise StopIteration
        self.position += 1
        return self.replies[self.position - 1]

    def skip_rounds(self, rounds: int) -> None:
        self.position = min(len(self.replies), rounds)
