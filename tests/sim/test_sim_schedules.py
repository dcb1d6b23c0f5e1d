"""The static per-rank programs of the schedules, and their builders' agreement with the declared geometry."""

from collections import Counter
from types import SimpleNamespace

import pytest

from paraplan.sim.one_f_one_b import interleaved_warmup, megatron_schedule_table
from paraplan.sim.program import BW, B, F, W, flatten
from paraplan.sim.schedules import PROGRAM_BUILDERS, action_arrays, rank_programs
from paraplan.specs.schedule import SCHEDULES, validate_schedule


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("pp", [1, 2, 4])
def test_every_action_runs_once(schedule: str, pp: int) -> None:
    m = 3 * pp
    vpp = 3 if SCHEDULES[schedule].interleaves else 1
    programs = rank_programs(schedule, pp, vpp, m)
    n_chunks = SCHEDULES[schedule].chunks_per_rank(vpp)
    for rank, prog in enumerate(programs):
        counts = Counter((kind if kind != BW else "BW", chunk, mb) for kind, chunk, mb in prog.actions)
        assert max(counts.values()) == 1
        forwards = {(c, mb) for kind, c, mb in prog.actions if kind == F}
        backs = {(c, mb) for kind, c, mb in prog.actions if kind in (B, BW)}
        weights = {(c, mb) for kind, c, mb in prog.actions if kind in (W, BW)}
        assert forwards == backs == weights
        per_chunk = Counter(c for c, _ in forwards)
        if SCHEDULES[schedule].microbatch_direction(m, m - 1):  # two directions: each chunk sees its half
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


def test_zb_v_order_is_torchtitans() -> None:
    # rank 0 of 2: 3 forwards of chunk 0 (warm-up 2(pp - r) - 1), then F B W on chunk 1 (the top of the V),
    # then the steady state F0 B0 W0 F1 B1 W1; the last rank pairs (F1, F0) before its first F1 B1 W1
    pp, m = 2, 4
    rank0, rank1 = (p.actions for p in rank_programs("zb-v", pp, 2, m))
    assert rank0[:3] == ((F, 0, 0), (F, 0, 1), (F, 0, 2))
    assert rank0[3:9] == ((F, 1, 0), (B, 1, 0), (W, 1, 0), (F, 1, 1), (B, 1, 1), (W, 1, 1))
    assert rank0[9:15] == ((F, 0, 3), (B, 0, 0), (W, 0, 0), (F, 1, 2), (B, 1, 2), (W, 1, 2))
    assert rank1[:6] == ((F, 0, 0), (F, 1, 0), (F, 0, 1), (F, 1, 1), (B, 1, 0), (W, 1, 0))


def test_zb_v_matches_torch_pipelining() -> None:
    # the order torch.distributed.pipelining's ScheduleZBVZeroBubble computes (torchtitan's ZBVZeroBubble), with
    # the idle slots it pads in (None) dropped
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    kinds = {"F": F, "I": B, "W": W}
    for pp, m in ((2, 4), (4, 8), (4, 5), (8, 16), (8, 32)):
        torch_like = SimpleNamespace(pp_group_size=pp, _n_microbatches=m, num_stages=2 * pp)
        for rank, prog in enumerate(rank_programs("zb-v", pp, 2, m)):
            ops = schedules.ScheduleZBVZeroBubble._calculate_single_rank_operations(torch_like, rank)
            expected = tuple(
                (kinds[op.computation_type.value], 0 if op.stage_index == rank else 1, op.microbatch_index)
                for op in ops
                if op is not None
            )
            assert prog.actions == expected, (pp, m, rank)


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


@pytest.mark.parametrize("schedule", ["dualpipe", "dualpipev", "zb-h1", "zb-v"])
def test_op_code_arrays_match_the_programs(schedule: str) -> None:
    """The op-code generation of DualPipe(V) and the zero-bubble schedules gives `flatten(rank_programs)` exactly:
    actions, lengths, pairs and dtypes, over every pp up to 12 and micro-batch counts around the thresholds."""
    for pp in range(2, 13):
        for m in [*range(1, 4 * pp + 3), 6 * pp + 1, 64]:
            for paired in (False, True):
                if validate_schedule(schedule, pp, 1, m):
                    continue
                arrays = action_arrays(schedule, pp, 1, m, paired)
                expected = flatten(rank_programs(schedule, pp, 1, m, paired))
                for got, want in zip(arrays, expected, strict=True):
                    assert got.dtype == want.dtype and got.tolist() == want.tolist(), (schedule, pp, m, paired)


# ------------------------------------------------------------------ builders vs. declared geometry
def test_every_declared_schedule_has_one_builder() -> None:
    assert list(PROGRAM_BUILDERS) == list(SCHEDULES)


def _shapes(schedule: str) -> list[tuple[int, int, int]]:
    """(pp, vpp, micro-batches) the schedule accepts, small enough to check every action."""
    vpps = (2, 3) if SCHEDULES[schedule].interleaves else (1,)
    shapes = [(pp, vpp, m) for pp in (1, 2, 3, 4, 6) for vpp in vpps for m in (1, 2, pp, 2 * pp, 3 * pp + 1, 4 * pp)]
    return [shape for shape in shapes if not validate_schedule(schedule, *shape)]


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("paired", [False, True])
def test_programs_match_the_declared_geometry(schedule: str, paired: bool) -> None:
    """Every action runs on a chunk the rank holds, and each micro-batch's forward, input gradient and weight
    gradient visit exactly the (rank, chunk)s of its declared path; B and W apart only where the schedule
    splits the backward; F&B pairs where it always pairs them; no forward after a backward where all
    forwards run first."""
    spec = SCHEDULES[schedule]
    assert _shapes(schedule), "some shape is valid"
    for pp, vpp, m in _shapes(schedule):
        programs = rank_programs(schedule, pp, vpp, m, paired)
        assert len(programs) == pp
        n_chunks = spec.chunks_per_rank(vpp)
        paths = spec.stage_paths(pp, vpp)
        visits: dict[tuple[int, int], set[tuple[int, int]]] = {}  # (kind group, mb) -> (rank, chunk)s
        for rank, program in enumerate(programs):
            for kind, chunk, mb in program.actions:
                assert 0 <= chunk < n_chunks, (schedule, pp, vpp, m, rank, chunk)
                assert 0 <= mb < m
                # 0: forwards; 1: input gradients (B or BW); 2: weight gradients (W or BW)
                for group in {F: (0,), B: (1,), W: (2,), BW: (1, 2)}[kind]:
                    visits.setdefault((group, mb), set()).add((rank, chunk))
            for k in program.pairs:
                assert program.actions[k][0] == F and program.actions[k + 1][0] in (B, BW)
        for mb in range(m):
            path = set(paths[spec.microbatch_direction(m, mb)])
            assert visits[(0, mb)] == visits[(1, mb)] == visits[(2, mb)] == path, (schedule, pp, vpp, m, mb)
        kinds = {kind for program in programs for kind, _, _ in program.actions}
        if not spec.split_backward:
            assert kinds <= {F, BW}, (schedule, kinds)
        elif pp > 1 and m >= 2 * pp:
            assert B in kinds and W in kinds, (schedule, pp, m)
        if spec.pairs_forward_backward and pp > 1:
            assert any(program.pairs for program in programs)
        if spec.all_forwards_first and pp > 1:  # with pp = 1 every schedule runs micro-batch by micro-batch
            for program in programs:
                first_back = next(i for i, a in enumerate(program.actions) if a[0] != F)
                assert all(a[0] != F for a in program.actions[first_back:])


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_action_arrays_of_every_schedule_are_its_programs(schedule: str) -> None:
    for pp, vpp, m in _shapes(schedule)[:12]:
        programs = rank_programs(schedule, pp, vpp, m, True)
        arrays = action_arrays(schedule, pp, vpp, m, True)
        flat = [a for p in programs for a in p.actions]
        assert list(zip(arrays.kind.tolist(), arrays.chunk.tolist(), arrays.mb.tolist(), strict=True)) == flat


def test_programs_reject_what_the_rules_reject() -> None:
    with pytest.raises(ValueError, match="needs micro-batches >= 2\\*pp"):
        rank_programs("dualpipev", 4, 1, 4)
    with pytest.raises(ValueError, match="unknown"):
        rank_programs("pipedream", 4, 1, 8)
