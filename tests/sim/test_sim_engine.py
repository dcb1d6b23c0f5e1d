"""The simulator against closed forms, the papers' memory figures, and its own event engine."""

import math
import random

import pytest
from random_costs import random_pipeline

from paraplan.sim.costs import ChunkCost, PipelineCosts, uniform_chunk, uniform_costs
from paraplan.sim.engine import simulate
from paraplan.specs.schedule import SCHEDULES, validate_schedule

F_S, B_S, W_S = 0.75, 1.25, 0.5  # exact in binary, so closed forms hold to the last bit


def run(schedule: str, pp: int, m: int, chunk: ChunkCost, **kw) -> object:
    return simulate(uniform_costs(schedule, pp, m, chunk, **kw))


@pytest.mark.parametrize("pp", [1, 2, 4, 8])
@pytest.mark.parametrize("extra", [0, 1, 5])
def test_1f1b_closed_form(pp: int, extra: int) -> None:
    m = pp + extra
    folded = run("1f1b", pp, m, uniform_chunk(F_S, B_S))  # W folded into B
    assert folded.pipeline_time_s == (m + pp - 1) * (F_S + B_S)
    assert folded.step_time_s == folded.pipeline_time_s
    split = run("1f1b", pp, m, uniform_chunk(F_S, B_S, W_S))  # 1F1B runs W right after B
    assert split.pipeline_time_s == (m + pp - 1) * (F_S + B_S + W_S)
    assert split.bubble_s[0] == (pp - 1) * (F_S + B_S + W_S)
    assert run("gpipe", pp, m, uniform_chunk(F_S, B_S)).pipeline_time_s == (m + pp - 1) * (F_S + B_S)


@pytest.mark.parametrize("pp,m", [(4, 8), (4, 16), (8, 16), (8, 32)])
def test_zb_h1_cuts_the_bubble_to_a_third_at_the_same_memory(pp: int, m: int) -> None:
    chunk = uniform_chunk(1.0, 1.0, 1.0)
    one_f_one_b = run("1f1b", pp, m, chunk)
    zb = run("zb-h1", pp, m, chunk)
    # Qi et al. 2023: (p-1)(F+B+W) -> (p-1)(F+B-W)
    assert max(one_f_one_b.bubble_s) == pytest.approx((pp - 1) * 3.0)
    assert max(zb.bubble_s) == pytest.approx((pp - 1) * 1.0)
    assert max(zb.bubble_s) / max(one_f_one_b.bubble_s) == pytest.approx(1 / 3)
    assert max(zb.peak_inflight_microbatches) == max(one_f_one_b.peak_inflight_microbatches) == pp
    for f, b, w in ((1.0, 1.5, 0.75), (1.0, 2.0, 1.0), (2.0, 1.0, 0.5)):  # unequal passes, W <= B
        assert max(run("zb-h1", pp, m, uniform_chunk(f, b, w)).bubble_s) == pytest.approx((pp - 1) * (f + b - w))


@pytest.mark.parametrize("vpp", [2, 3, 4])
@pytest.mark.parametrize("pp,m", [(4, 16), (8, 32), (4, 12)])
def test_interleaving_divides_the_bubble_by_v(vpp: int, pp: int, m: int) -> None:
    base = run("1f1b", pp, m, uniform_chunk(1.0, 2.0))
    inter = run("interleaved", pp, m, uniform_chunk(1.0 / vpp, 2.0 / vpp), vpp=vpp)
    assert inter.bubble_s[0] == pytest.approx(base.bubble_s[0] / vpp, rel=1e-9)
    assert inter.compute_busy_s[0] == pytest.approx(base.compute_busy_s[0])


def test_uneven_stages_follow_the_slowest() -> None:
    # 1F1B with one slow stage: the step is at least m times the slow stage, plus the others' fill/drain
    pp, m = 4, 16
    rows = [(uniform_chunk(1.0, 2.0),) for _ in range(pp)]
    rows[2] = (uniform_chunk(1.5, 3.0),)
    res = simulate(PipelineCosts("1f1b", m, tuple(rows), p2p_s=0.0, optimizer_s=0.0))
    fill, drain = 2 * 1.0, 2 * 2.0  # forwards of ranks 0-1 before the slow stage, their backwards after
    assert m * 4.5 + fill + drain <= res.pipeline_time_s <= m * 4.5 + 3 * 3.0
    assert res.compute_busy_s[2] == m * 4.5
    assert res.bubble_s[2] == min(res.bubble_s)


def test_peak_inflight_matches_the_papers() -> None:
    pp, m = 4, 16
    chunk = uniform_chunk(1.0, 1.0, 1.0, activation_bytes=10.0)
    assert run("1f1b", pp, m, chunk).peak_inflight_microbatches == (4, 3, 2, 1)  # rank i holds p - i
    assert run("1f1b", pp, m, chunk).peak_activation_bytes == (40.0, 30.0, 20.0, 10.0)
    assert run("gpipe", pp, m, chunk).peak_inflight_microbatches == (m,) * pp
    vpp = 2
    inter = run("interleaved", pp, m, chunk, vpp=vpp)
    for rank in range(pp):
        warmup = (pp - rank - 1) * 2 + (vpp - 1) * pp  # Megatron's warm-up forwards, plus the first steady F
        assert inter.peak_inflight_chunks[rank] == warmup + 1
    # Narayanan et al. 2021 / Korthikanti et al. 2022: rank 0 holds p * (1 + (p-1)/(p*v)) micro-batches
    assert inter.peak_inflight_microbatches[0] == pytest.approx(pp * (1 + (pp - 1) / (pp * vpp)))
    assert run("zb-h1", pp, m, chunk).peak_inflight_microbatches == (pp,) * pp
    # ZB-V: 2p chunk-micro-batches (p whole-rank micro-batches), 1F1B's peak
    assert max(run("zb-v", pp, m, chunk).peak_inflight_chunks) == 2 * pp
    # DualPipe README table: activation PP+1 (in stages) for both DualPipe and DualPipeV (PP = 2p stages)
    assert run("dualpipe", pp, m, chunk).peak_inflight_chunks == (pp + 1,) * pp
    assert run("dualpipev", pp, m, chunk).peak_inflight_chunks == (2 * pp + 1,) * pp


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_dualpipe_bubbles_match_the_repository_table(pp: int) -> None:
    # DualPipe README: bubble (PP/2 - 1)(F&B + B - 3W), F&B an overlapped pair and B a full backward,
    # exact with equal F, B, W; DualPipeV on p ranks is DualPipe on 2p "cut in half" (PP = 2p stages)
    def formula(stages: int, f: float, b: float, w: float) -> float:
        return (stages / 2 - 1) * ((f + b + w) + (b + w) - 3 * w)

    m = 4 * pp
    for t in (1.0, 0.5):
        assert max(run("dualpipe", pp, m, uniform_chunk(t, t, t)).bubble_s) == formula(pp, t, t, t)
        assert max(run("dualpipev", pp, m, uniform_chunk(t, t, t)).bubble_s) == formula(2 * pp, t, t, t)
    f, b, w = 1.0, 1.5, 0.75  # unequal: the table's formula is an upper bound
    dual_v = max(run("dualpipev", pp, m, uniform_chunk(f, b, w)).bubble_s)
    assert dual_v <= formula(2 * pp, f, b, w)
    assert dual_v == max(run("dualpipe", 2 * pp, 2 * m, uniform_chunk(f, b, w)).bubble_s)


# F, B, W per rank: equal, the Qi et al. mix, recompute-like (B ~ 2F, W small or none), a heavy forward
PASS_TIMES = [(1.0, 1.0, 1.0), (0.75, 1.25, 0.5), (1.0, 2.0, 0.25), (1.0, 2.0, 0.0), (2.0, 1.0, 0.5)]


@pytest.mark.parametrize("f,b,w", PASS_TIMES)
@pytest.mark.parametrize("pp", [2, 4, 8])
def test_zb_v_bubble_is_below_1f1b_and_zb_h1_whatever_the_pass_times(f: float, b: float, w: float, pp: int) -> None:
    # Balanced stages, the same work per rank (ZB-V's two chunks each hold half). The static order is played with
    # real times, so it must not assume F = B = W: with activation recompute B is about 2F and W small, where an
    # order built for unit times stalled every rank once per micro-batch (bubble growing with m, above 1F1B's).
    per_rank, half = uniform_chunk(f, b, w), uniform_chunk(f / 2, b / 2, w / 2)
    bubbles = {}
    for m in (pp, 2 * pp, 4 * pp):
        ofob, zb_h1, zb_v = run("1f1b", pp, m, per_rank), run("zb-h1", pp, m, per_rank), run("zb-v", pp, m, half)
        assert max(zb_v.bubble_s) <= max(zb_h1.bubble_s) <= max(ofob.bubble_s), m
        assert zb_v.compute_busy_s == pytest.approx(ofob.compute_busy_s)  # W split and V shape add no work
        bubbles[m] = max(zb_v.bubble_s)
    # from 2pp - 1 micro-batches on the steady state has no bubble: more micro-batches add none
    assert bubbles[4 * pp] == pytest.approx(bubbles[2 * pp])
    # DualPipeV (same V, F&B pairs; no EP comm here to hide): also at most 1F1B's, and flat in m
    dual_v = [max(run("dualpipev", pp, m, half).bubble_s) for m in (2 * pp, 4 * pp)]
    assert dual_v[0] == pytest.approx(dual_v[1])
    assert dual_v[0] <= max(run("1f1b", pp, 2 * pp, per_rank).bubble_s)
    if f == b == w:  # only the fill of the first forwards is left: (p-1) chunk forwards, half ZB-H1's (p-1)(F+B-W)
        assert bubbles[2 * pp] == pytest.approx((pp - 1) * f / 2)


def test_zero_bubble_schedules_beat_1f1b() -> None:
    pp, m = 8, 32
    per_rank = uniform_chunk(2.0, 2.0, 2.0)
    half = uniform_chunk(1.0, 1.0, 1.0)  # two chunks per rank, same work per rank
    ofob = run("1f1b", pp, m, per_rank).step_time_s
    assert run("zb-h1", pp, m, per_rank).step_time_s < ofob
    assert run("zb-v", pp, m, half).step_time_s < run("zb-h1", pp, m, per_rank).step_time_s
    assert run("dualpipev", pp, m, half).step_time_s < ofob


CASES = [
    (s, pp, m)
    for s in SCHEDULES
    for pp in (1, 2, 4, 8, 16, 64)
    for m in (2 * pp, 3 * pp + 2, 4 * pp, 512)
    if not validate_schedule(s, pp, 2 if s == "interleaved" else 1, m)
]


@pytest.mark.parametrize("schedule,pp,m", CASES)
def test_every_schedule_runs(schedule: str, pp: int, m: int) -> None:
    chunk = uniform_chunk(1.0, 1.0, 0.5, comm_total_s={"ep": 0.5}, comm_exposed_s={"ep": 0.3})
    costs = uniform_costs(schedule, pp, m, chunk, vpp=2, p2p_s=0.01, optimizer_s=0.5)
    first = simulate(costs)
    again = simulate(costs)
    assert first == again  # deterministic, cold (first run of the shape) and warm alike
    per_rank_compute = max(first.compute_busy_s) * (1 - 1e-12)  # the same floats, added in another order
    assert first.step_time_s >= per_rank_compute + 0.5
    assert first.pipeline_time_s >= per_rank_compute
    assert sum(first.breakdown_s.values()) == pytest.approx(first.step_time_s, rel=1e-12)


def random_costs(rng: random.Random, schedule: str) -> PipelineCosts:
    pp = rng.choice([1, 2, 3, 4] if schedule not in ("dualpipe",) else [2, 4])
    vpp = rng.choice([2, 3]) if schedule == "interleaved" else 1
    m = pp * rng.choice([1, 2, 3]) + (0 if schedule == "interleaved" else rng.choice([0, 0, 1]))
    if schedule in ("dualpipe", "dualpipev"):
        m = 2 * pp + 2 * rng.randrange(3)
    fsdp = rng.random() < 0.3
    return random_pipeline(rng, schedule, pp, vpp, m, fsdp)


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_fast_path_equals_event_engine(schedule: str) -> None:
    rng = random.Random(list(SCHEDULES).index(schedule))
    for _ in range(40):
        costs = random_costs(rng, schedule)
        fast = simulate(costs, engine="fast")
        full = simulate(costs, engine="events")
        for name in ("step_time_s", "pipeline_time_s", "optimizer_s"):
            assert math.isclose(getattr(fast, name), getattr(full, name), rel_tol=1e-12), (name, costs)
        assert fast.dp_done_s == pytest.approx(full.dp_done_s, rel=1e-12)
        assert fast.bubble_s == pytest.approx(full.bubble_s, rel=1e-12)
        for key, value in fast.comm_exposed_s.items():
            assert value == pytest.approx(full.comm_exposed_s[key], rel=1e-9, abs=1e-12), key
        assert fast.peak_activation_bytes == full.peak_activation_bytes


@pytest.mark.parametrize("schedule,pp,m", [("1f1b", 1, 2), ("1f1b", 4, 8), ("interleaved", 4, 8), ("zb-v", 4, 8)])
def test_grad_reduce_overlap(schedule: str, pp: int, m: int) -> None:
    chunk = uniform_chunk(1.0, 2.0, 0.0, dp_grad_reduce_s=3.0)
    hidden = run(schedule, pp, m, chunk, vpp=2, overlap_grad_reduce=True)
    exposed = run(schedule, pp, m, chunk, vpp=2, overlap_grad_reduce=False)
    n_chunks = SCHEDULES[schedule].chunks_per_rank(2)
    assert exposed.comm_total_s["dp"] == 3.0 * n_chunks * pp  # every pipeline rank's reduction (`PIPELINE_WIDE_COMM`)
    assert exposed.comm_exposed_s["dp"] == 3.0 * n_chunks  # not overlapped: the last rank's, all of it
    assert hidden.comm_exposed_s["dp"] < hidden.comm_total_s["dp"]
    assert hidden.step_time_s < exposed.step_time_s
    assert hidden.pipeline_time_s == exposed.pipeline_time_s


def test_param_gather_overlap() -> None:
    chunk = uniform_chunk(1.0, 2.0, dp_param_gather_s=0.8)
    after = run("1f1b", 4, 8, chunk)
    overlapped = run("1f1b", 4, 8, chunk, overlap_param_gather=True)
    assert after.comm_exposed_s["dp"] == 0.8 and after.breakdown_s["dp_param_gather_exposed"] == 0.8
    # 8 buckets, F = 1.0 > gather: only the first bucket (0.8/8) delays the first forward
    assert overlapped.step_time_s == pytest.approx(after.step_time_s - 0.8 + 0.1)
    assert overlapped.comm_exposed_s["dp"] == pytest.approx(0.1)


def test_ep_overlap_hides_all_to_all() -> None:
    chunk = uniform_chunk(1.0, 1.0, 1.0, comm_total_s={"ep": 1.2}, comm_exposed_s={"ep": 1.2})
    plain = run("dualpipe", 4, 16, chunk, ep_overlap=False)
    paired = run("dualpipe", 4, 16, chunk)  # default on for dualpipe
    assert paired.comm_exposed_s["ep"] < plain.comm_exposed_s["ep"] == plain.comm_total_s["ep"]
    assert paired.step_time_s < plain.step_time_s
    # interleaved pairs steady-state F and B of different virtual stages (Megatron's EP A2A overlap)
    inter = run("interleaved", 4, 16, chunk, vpp=2)
    inter_paired = run("interleaved", 4, 16, chunk, vpp=2, ep_overlap=True)
    assert inter_paired.step_time_s < inter.step_time_s
    assert inter_paired.peak_inflight_chunks[0] == inter.peak_inflight_chunks[0] + 1  # one more warm-up F
    # schedules without F&B pairs ignore the switch
    assert run("1f1b", 4, 16, chunk, ep_overlap=True) == run("1f1b", 4, 16, chunk)


@pytest.mark.parametrize(
    "schedule,pp,vpp,chunks", [("1f1b", 1, 1, 1), ("interleaved", 4, 2, 2), ("dualpipev", 4, 1, 2)]
)
def test_ep_overlap_hides_behind_the_other_micro_batch_only(schedule: str, pp: int, vpp: int, chunks: int) -> None:
    """An all-to-all longer than the compute: a pair hides each one's all-to-all behind the other's compute at
    most, never behind its own, and overlap never makes the step slower. At pp = 1 the pairs are consecutive
    micro-batches (megatron-core's `combined_1f1b_schedule_for_no_pipelining`)."""
    f, b, w, a2a, m = 1.0, 1.0, 0.5, 6.0, 16
    chunk = uniform_chunk(f + a2a / 2, b + a2a / 2, w, comm_total_s={"ep": a2a}, comm_exposed_s={"ep": a2a})
    off = run(schedule, pp, m, chunk, vpp=vpp, ep_overlap=False)
    on = run(schedule, pp, m, chunk, vpp=vpp, ep_overlap=True)
    assert on.step_time_s <= off.step_time_s
    assert on.comm_exposed_s["ep"] < off.comm_exposed_s["ep"] == off.comm_total_s["ep"]
    # per rank, at most every F and every B in a pair, each hiding at most the other's compute
    assert off.comm_exposed_s["ep"] - on.comm_exposed_s["ep"] <= m * chunks * (f + b + w) + 1e-9
    if schedule == "1f1b":  # m - 1 pairs, each hides min(a2a/2, B + W) + min(a2a/2, F)
        hidden = (m - 1) * (min(a2a / 2, b + w) + min(a2a / 2, f))
        assert on.comm_exposed_s["ep"] == pytest.approx(off.comm_exposed_s["ep"] - hidden)
        assert on.step_time_s == pytest.approx(off.step_time_s - hidden)


def test_fsdp_prefetch_and_exposure() -> None:
    hidden = run("1f1b", 1, 8, uniform_chunk(1.0, 2.0, fsdp_gather_s=0.5, fsdp_reduce_scatter_s=0.5))
    assert hidden.comm_total_s["fsdp"] == 8 * (2 * 0.5 + 0.5)
    # exposed: the very first gather, and the last reduce-scatter (the optimizer needs its gradients)
    assert hidden.comm_exposed_s["fsdp"] == 0.5 + 0.5
    assert hidden.step_time_s == 8 * 3.0 + 0.5 + 0.5
    assert hidden.breakdown_s["fsdp_exposed"] == 1.0 and hidden.breakdown_s["dp_grad_reduce_exposed"] == 0.0
    slow = run("1f1b", 1, 8, uniform_chunk(1.0, 2.0, fsdp_gather_s=1.5))
    assert slow.comm_exposed_s["fsdp"] > 1.5


def test_fsdp_units_pipeline_the_edges() -> None:
    """In u units, the first task waits for one unit of its gather, and only the last unit's reduce-scatter
    comes after the last task; a gather longer than the task stretches it to the gather's end + 1/u of it."""
    u = 4
    hidden = run("1f1b", 1, 8, uniform_chunk(1.0, 2.0, fsdp_gather_s=0.5, fsdp_reduce_scatter_s=0.5, fsdp_units=u))
    assert hidden.step_time_s == pytest.approx(8 * 3.0 + 0.5 / u + 0.5 / u)
    assert hidden.comm_exposed_s["fsdp"] == pytest.approx(1.0 / u)
    one = run("1f1b", 1, 1, uniform_chunk(1.0, 2.0, fsdp_gather_s=4.0, fsdp_units=u))
    # F waits for 4 - 3/4 (its last unit arrives at 4, then computes 1/4); B's gather starts with F, ends at 8
    assert one.step_time_s == pytest.approx(4.0 + 4.0 + 2.0 / u)
    assert (
        one.step_time_s
        == simulate(
            uniform_costs("1f1b", 1, 1, uniform_chunk(1.0, 2.0, fsdp_gather_s=4.0, fsdp_units=u)), engine="events"
        ).step_time_s
    )


def test_fsdp_on_demand_adds_up() -> None:
    """Gathered on demand (DeepSpeed ZeRO-3), the communication is not hidden: each task waits for its own
    gather, issued when the rank is ready, and each reduce-scatter holds the rank."""
    chunk = uniform_chunk(1.0, 2.0, fsdp_gather_s=0.5, fsdp_reduce_scatter_s=0.25, fsdp_on_demand=True)
    for engine in ("fast", "events"):
        res = simulate(uniform_costs("1f1b", 1, 3, chunk), engine=engine)
        assert res.step_time_s == pytest.approx(3 * (1.0 + 2.0 + 2 * 0.5 + 0.25))
        assert res.comm_exposed_s["fsdp"] == pytest.approx(3 * (2 * 0.5 + 0.25))


def test_p2p_and_critical_path() -> None:
    for pp, m in ((2, 2), (4, 8), (8, 16)):
        res = run("1f1b", pp, m, uniform_chunk(1.0, 2.0), p2p_s=0.25)
        # with equal stages every second beyond the closed form is a send on the critical path
        exposed = res.comm_exposed_s["pp"]
        assert res.pipeline_time_s == pytest.approx((m + pp - 1) * 3.0 + exposed)
        assert exposed >= 2 * (pp - 1) * 0.25  # at least the fill and the drain cross every link
        assert res.breakdown_s["pipeline_bubble"] == pytest.approx((pp - 1) * 3.0)
        # every rank's sends: each micro-batch's activation and gradient cross each of the pp - 1 links
        assert res.comm_total_s["pp"] == pytest.approx(2 * m * (pp - 1) * 0.25)
        assert exposed <= res.comm_total_s["pp"]
    assert run("1f1b", 2, 2, uniform_chunk(1.0, 2.0), p2p_s=0.25).pipeline_time_s == 9.5  # worked by hand


def test_bad_costs_raise_with_every_problem() -> None:
    good = uniform_costs("1f1b", 4, 8, uniform_chunk(1.0, 2.0))
    with pytest.raises(ValueError, match=r"zb-h1 needs micro-batches >= pp \(got 2 < 4\)"):
        simulate(uniform_costs("zb-h1", 4, 2, uniform_chunk(1.0, 1.0, 1.0)))
    # 1F1B with fewer micro-batches than stages runs (Megatron and DeepSpeed cap the warm-up at m)
    assert simulate(uniform_costs("1f1b", 4, 2, uniform_chunk(1.0, 2.0))).pipeline_time_s == (2 + 4 - 1) * 3.0
    bad = PipelineCosts("1f1b", 8, good.chunks, p2p_s=-1.0, optimizer_s=(1.0, 2.0))
    with pytest.raises(ValueError) as err:
        simulate(bad)
    assert "p2p_s is negative" in str(err.value) and "optimizer_s has 2 values for pp=4" in str(err.value)


def test_breakdown_names_the_parts() -> None:
    chunk = ChunkCost(
        forward_s=1.0,
        backward_input_s=2.0,
        backward_weight_s=0.5,
        comm_total_s={"tp": 0.6, "etp": 0.4},
        comm_exposed_s={"tp": 0.3, "etp": 0.2},
        activation_bytes=1.0,
        dp_grad_reduce_s=0.5,
        dp_param_gather_s=0.25,
        fsdp_gather_s=0.0,
        fsdp_reduce_scatter_s=0.0,
        recompute_s=0.5,
    )
    res = run("1f1b", 2, 4, chunk, optimizer_s=0.75)
    parts = res.breakdown_s
    assert res.comm_total_s["tp"] == 4 * 0.6 and res.comm_total_s["etp"] == 4 * 0.4  # other kinds pass through
    assert parts["tp_comm_exposed"] == pytest.approx(4 * 0.3) and parts["etp_comm_exposed"] == pytest.approx(0.8)
    assert parts["recompute"] == 4 * 0.5
    # forward: 1/3 of the F+B communication lands in F
    assert parts["forward_compute"] == pytest.approx(4 * (1.0 - 0.5 / 3))
    assert parts["optimizer"] == 0.75 and parts["dp_param_gather_exposed"] == 0.25
    assert parts["dp_grad_reduce_exposed"] == 0.5
    assert sum(parts.values()) == pytest.approx(res.step_time_s)
    assert res.step_time_s == res.pipeline_time_s + 0.5 + 0.75 + 0.25


@pytest.mark.parametrize(
    "shape",
    [("interleaved", 4, 3, 8, True), ("zb-v", 4, 1, 8, False), ("dualpipe", 4, 1, 8, True), ("1f1b", 3, 1, 5, False)],
)
def test_static_and_swept_orders_are_topological(shape: tuple) -> None:
    """Both orders put every task after the previous one on its rank and after its inputs' producers."""
    from paraplan.sim.order import static_order, sweep_order
    from paraplan.sim.plan import build_plan

    plan = build_plan(*shape)
    for order in (static_order(plan), sweep_order(plan)):
        assert order is not None and sorted(order.tolist()) == list(range(1, plan.n_tasks + 1))
        position = {task: k for k, task in enumerate(order.tolist())}
        for task in range(1, plan.n_tasks + 1):
            if task not in plan.lo:
                assert position[task - 1] < position[task]
            for slot in plan.deps(task):
                if plan.send_base <= slot < plan.release_base:
                    assert position[int(plan.send_producer[slot - plan.send_base])] < position[task]


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_without_breakdown_the_figures_are_the_same(schedule: str) -> None:
    chunk = uniform_chunk(
        1e-3, 2e-3, 1e-3, comm_total_s={"tp": 4e-4}, comm_exposed_s={"tp": 1e-4}, dp_grad_reduce_s=5e-3
    )
    vpp = 2 if schedule == "interleaved" else 1
    costs = uniform_costs(schedule, 4, 8, chunk, vpp=vpp, p2p_s=1e-4, optimizer_s=2e-3, overlap_grad_reduce=True)
    full, light = simulate(costs), simulate(costs, breakdown=False)
    assert light.step_time_s == full.step_time_s and light.peak_activation_bytes == full.peak_activation_bytes
    assert light.bubble_s == full.bubble_s and light.critical_rank == full.critical_rank
    assert light.breakdown_s == {} and full.breakdown_s


@pytest.mark.parametrize("shape", [("dualpipe", 4, 1, 8), ("dualpipev", 4, 1, 12), ("interleaved", 4, 2, 8)])
def test_pairs_the_numpy_check_keeps_are_those_the_play_keeps(shape: tuple, monkeypatch) -> None:
    from paraplan.sim import plan as P

    fast = P._build_plan(*shape, True)
    monkeypatch.setattr(P, "_pairs_runnable", lambda *args: False)  # always play the orders
    played = P._build_plan(*shape, True)
    assert fast.first_action.tolist() == played.first_action.tolist()
    assert len(fast.pair_keys) > 0
