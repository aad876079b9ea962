"""OpenEvolve evaluator template: scores an evolved routing policy with blis-simpy.

    openevolve-run initial_program.py evaluator.py --config config.yaml --iterations 50

Change the workload, seeds or axis below; the fitness weights are the workload's `fitness`
section. Stage 1 of the cascade runs the first seed only.
"""

from pathlib import Path

from blis_simpy.search.openevolve_evaluator import BlisEvaluator

HERE = Path(__file__).resolve().parent
BLIS = BlisEvaluator([HERE / "workload.yaml"], axis="routing", seeds=[1, 2],
                     features=("cache_hit_rate", "completion"))

evaluate = BLIS.evaluate
evaluate_stage1 = BLIS.evaluate_stage1
evaluate_stage2 = BLIS.evaluate_stage2
