"""The text a search framework's reflection step reads about one run: the run's trace summary
(`Result.summary_text`: outcome against the SLO targets, key issues, counterfactuals, worst
decisions, a suggested focus) under the fitness it scored."""

from __future__ import annotations

from blis_simpy.sim.result import Result

FEEDBACK_TOKENS = 600  # a sweep keeps one per run; GEPA reads several per reflection


def feedback(result: Result) -> str:
    """One run for LLM reflection (GEPA's reflective dataset, OpenEvolve's artifacts)."""
    text = result.summary_text(max_tokens=FEEDBACK_TOKENS)
    if result.evaluation is not None and result.evaluation.weights:
        objectives = ", ".join(f"{k} {v:.3g}" for k, v in result.evaluation.objectives.items())
        text = f"Fitness {result.evaluation.fitness:.4g} ({objectives})\n\n{text}"
    return text
