"""Plans: the versioned JSON document, its atomic writing, and the independent verifier."""

from wsealloc.plan.schema import SCHEMA, Plan

__all__ = ["SCHEMA", "Plan"]
