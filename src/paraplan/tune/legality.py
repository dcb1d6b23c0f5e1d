"""Legality of a candidate: the one validator (`paraplan.specs.validate.layout_problems`), nothing else."""

from __future__ import annotations

from paraplan.specs.training import TrainingSpec
from paraplan.specs.validate import layout_problems
from paraplan.tune.candidate import Candidate, TuneProblem, model_stages, pipeline_split, to_training


def candidate_problems(problem: TuneProblem, c: Candidate, train: TrainingSpec | None = None) -> list[str]:
    """Every rule the candidate breaks, one line each (empty: legal). `train`: its spec, if already built."""
    if c.tp < 1 or c.pp < 1 or c.cp < 1 or problem.gpu_counts.count(c.num_gpus) == 0:
        return [f"GPU count {c.num_gpus} is not one of the problem's ({', '.join(map(str, problem.gpu_counts))})"]
    stages = model_stages(c.schedule, c.pp, c.vpp)
    if pipeline_split(problem.model, stages) is None:
        return [
            f"layers {problem.model.num_layers} do not split over {stages} pipeline stages "
            "(evenly, or counting the embedding and the loss as layers)"
        ]
    return spec_problems(problem, c.num_gpus, train or to_training(problem, c))


def spec_problems(problem: TuneProblem, num_gpus: int, train: TrainingSpec) -> list[str]:
    return layout_problems(problem.model, problem.system(num_gpus), train)
