"""Op models: per kernel, every grid shape with its costs, and the legal Pareto frontier solvers use."""

from wsealloc.opmodels.enumerate import (
    DATAFLOW_CODES,
    Frontier,
    OpModelTable,
    Reason,
    enumerate_op_models,
    grid_sides,
    pareto_frontier,
)
from wsealloc.opmodels.table import CostTable, KernelCosts, build_cost_table

__all__ = [
    "DATAFLOW_CODES",
    "CostTable",
    "Frontier",
    "KernelCosts",
    "OpModelTable",
    "Reason",
    "build_cost_table",
    "enumerate_op_models",
    "grid_sides",
    "pareto_frontier",
]
