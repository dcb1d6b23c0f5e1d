"""Schedule layouts, rules and the static per-rank programs."""

from collections import Counter

import pytest

from paraplan.sim.schedules import (
    BW,
    SCHEDULES,
    B,
    F,
    W,
    chunk_model_stage,
    chunks_per_rank,
    interleaved_warmup,
    megatron_schedule_table,
    param_copies,
    rank_programs,
    stage_order,
    stage_paths,
    validate_schedule,
)


def test_stage_order_layouts() -> None:
    assert stage_order("1f1b", 4, 1) == [(0, 0), (1, 0), (2, 0), (3, 0)]
    # Megatron interleaved: chunk c of rank r holds virtual stage c*pp + r
    assert stage_order("interleaved", 2, 3) == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    v_shape = [(0, 0), (1, 0), (2, 0), (2, 1), (1, 1), (0, 1)]
    assert stage_order("zb-v", 3, 2) == v_shape
    assert stage_order("dualpipev", 3, 2) == v_shape
    assert stage_order("dualpipe", 4, 2) == [(0, 0), (1, 0), (2, 0), (3, 0)]
    # dualpipe: rank r holds stage r (direction 0) and a copy of stage p-1-r (direction 1)
    assert chunk_model_stage("dualpipe", 4, 2) == ((0, 3), (1, 2), (2, 1), (3, 0))
    assert stage_paths("dualpipe", 4, 2)[1] == ((3, 1), (2, 1), (1, 1), (0, 1))
    assert chunk_model_stage("zb-v", 3, 2) == ((0, 5), (1, 4), (2, 3))


def test_chunks_and_copies() -> None:
    assert [chunks_per_rank(s, 4) for s in SCHEDULES] == [1, 1, 4, 1, 2, 2, 2]
    assert [param_copies(s) for s in SCHEDULES] == [1, 1, 1, 1, 1, 2, 1]
    with pytest.raises(ValueError, match="unknown pipeline schedule"):
        chunks_per_rank("pipedream", 1)


def test_validate_reports_every_rule_with_numbers() -> None:
    assert validate_schedule("1f1b", 4, 1, 8) == []
    assert validate_schedule("1f1b", 8, 2, 4) == [
        "vpp=2 needs the interleaved schedule (1f1b holds one chunk per rank)",
    ]
    assert validate_schedule("zb-h1", 8, 1, 4) == ["zb-h1 needs micro-batches >= pp (got 4 < 8)"]
    assert validate_schedule("dualpipe", 3, 2, 5) == [
        "dualpipe needs an even pp (got pp=3)",
        "dualpipe needs an even number of micro-batches (got 5)",
        "dualpipe needs micro-batches >= 2*pp (got 5 < 6)",
    ]
    assert validate_schedule("interleaved", 4, 1, 2) == [
        "interleaved 1F1B needs vpp >= 2 (got vpp=1); use 1f1b",
        "interleaved 1F1B needs micro-batches divisible by pp (got 2 % 4 = 2)",
        "interleaved 1F1B needs micro-batches >= pp (got 2 < 4)",
    ]
    assert "unknown" in validate_schedule("nope", 4, 1, 8)[0]
    assert validate_schedule("gpipe", 0, 1, 8) == ["pipeline parallel size must be >= 1 (got pp=0)"]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("pp", [1, 2, 4])
def test_every_action_runs_once(schedule: str, pp: int) -> None:
    m = 3 * pp
    vpp = 3 if schedule == "interleaved" else 1
    programs = rank_programs(schedule, pp, vpp, m)
    n_chunks = chunks_per_rank(schedule, vpp)
    for rank, prog in enumerate(programs):
        counts = Counter((kind if kind != BW else "BW", chunk, mb) for kind, chunk, mb in prog.actions)
        assert max(counts.values()) == 1
        forwards = {(c, mb) for kind, c, mb in prog.actions if kind == F}
        backs = {(c, mb) for kind, c, mb in prog.actions if kind in (B, BW)}
        weights = {(c, mb) for kind, c, mb in prog.actions if kind in (W, BW)}
        assert forwards == backs == weights
        per_chunk = Counter(c for c, _ in forwards)
        if schedule == "dualpipe":
            assert per_chunk == ({0: m // 2, 1: m // 2} if pp > 1 else {0: m // 2, 1: m - m // 2})
        else:
            assert per_chunk == {c: m for c in range(n_chunks)}, (rank, per_chunk)


def test_megatron_interleaved_order() -> None:
    # groups of pp micro-batches run chunk by chunk (get_schedule_table)
    assert megatron_schedule_table(4, 2, 2) == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0), (2, 1), (3, 1)]
    assert megatron_schedule_table(3, 2, 2) == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]
    # warm-up: (pp - rank - 1) * 2 + (vpp - 1) * pp forwards
    pp, vpp, m = 4, 3, 8
    for rank, prog in enumerate(rank_programs("interleaved", pp, vpp, m)):
        warmup = interleaved_warmup(pp, vpp, rank, m)
        assert warmup == (pp - rank - 1) * 2 + (vpp - 1) * pp
        assert all(kind == F for kind, _, _ in prog.actions[:warmup])
        assert prog.actions[warmup][0] == F and prog.actions[warmup + 1][0] == BW


def test_one_f_one_b_order() -> None:
    programs = rank_programs("1f1b", 4, 1, 6)
    assert programs[0].actions[:5] == ((F, 0, 0), (F, 0, 1), (F, 0, 2), (F, 0, 3), (BW, 0, 0))
    assert programs[3].actions[:4] == ((F, 0, 0), (BW, 0, 0), (F, 0, 1), (BW, 0, 1))


def test_dualpipe_follows_the_repository_steps() -> None:
    # rank 0 of DualPipe with 4 ranks, 8 micro-batches: step 1 nF0 (2), step 2 F0 F1, step 3 B1 W F1 ...
    actions = rank_programs("dualpipe", 4, 2, 8)[0].actions
    assert actions[:6] == ((F, 0, 0), (F, 0, 1), (F, 0, 2), (F, 1, 4), (B, 1, 4), (W, 1, 4))
    # the last rank mirrors it on the other direction
    mirror = rank_programs("dualpipe", 4, 2, 8)[3].actions
    assert mirror[:4] == ((F, 1, 4), (F, 1, 5), (F, 1, 6), (F, 0, 0))


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved"])
@pytest.mark.parametrize("paired", [False, True])
def test_action_arrays_match_the_programs(schedule: str, paired: bool) -> None:
    """The numpy generation of the 1F1B family gives `rank_programs` exactly, pairs included."""
    from paraplan.sim.actions import action_arrays

    for pp in (2, 3, 4, 8):
        for vpp in (1,) if schedule == "1f1b" else (2, 3, 5):
            for m in (1, 2, pp, 2 * pp, 3 * pp + 1):
                if validate_schedule(schedule, pp, vpp, m):
                    continue
                programs = rank_programs(schedule, pp, vpp, m, paired)
                arrays = action_arrays(schedule, pp, vpp, m, paired)
                flat = [a for p in programs for a in p.actions]
                assert list(zip(arrays.kind.tolist(), arrays.chunk.tolist(), arrays.mb.tolist(), strict=True)) == flat
                assert arrays.lengths.tolist() == [len(p.actions) for p in programs]
                offsets = [sum(len(p.actions) for p in programs[:r]) for r in range(pp)]
                assert arrays.pair_starts.tolist() == [offsets[r] + k for r, p in enumerate(programs) for k in p.pairs]
