"""The planner (pure Python): snapshot in, `ShiftPlan` out. See planner.py for the steps."""

from pivot.plan.candidates import Candidate, CandidateTable, build_candidates
from pivot.plan.evaluate import CandidateEvaluator, benefit, overall_throughput
from pivot.plan.pairs import ShiftPair, build_pairs, choose_up_role, training_pair
from pivot.plan.planner import PivotPlanner, Planner, PlanTimings, ShiftPlan
from pivot.plan.search import coarse_to_fine
from pivot.plan.snapshot import ClusterSnapshot
from pivot.plan.strategies import RuleBasedPlanner, StaticPlanner, make_planner
from pivot.sched.records import INFERENCE_ROLES, Role

__all__ = [
    "INFERENCE_ROLES",
    "Candidate",
    "CandidateTable",
    "CandidateEvaluator",
    "ClusterSnapshot",
    "PivotPlanner",
    "PlanTimings",
    "Planner",
    "Role",
    "RuleBasedPlanner",
    "ShiftPair",
    "ShiftPlan",
    "StaticPlanner",
    "benefit",
    "build_candidates",
    "build_pairs",
    "choose_up_role",
    "coarse_to_fine",
    "make_planner",
    "overall_throughput",
    "training_pair",
]
