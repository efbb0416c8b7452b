"""The lower bounds a fleet run ends with: each model it planned, on each system that took part.

Computed from what the run stored (plans and records), by the same analysis as ``benanza analyze lower-bound
--system``, so the fleet's main command answers the question the tool exists for, not
only how many benchmarks it ran.
"""

from __future__ import annotations

from benanza.analysis.lower_bound import LowerBound
from benanza.analysis.stored import PlanSelection, analyze_stored
from benanza.config import FleetConfig
from benanza.fleet.driver import FleetSummary
from benanza.store.base import Store


def run_lower_bounds(store: Store, config: FleetConfig, summary: FleetSummary) -> list[LowerBound]:
    """One row per (model, system, batch size) of the run.

    Models that failed to load and systems without a stack are left out: the summary's
    problems name them.
    """
    systems = [name for name, result in summary.systems.items() if result.stack_id and not result.error]
    if not systems or not summary.planned:
        return []
    # from the plans the run stored (the model files are not read again), each model at the batch sizes the run
    # planned it at (its own where none was asked): not every size stored of it, nor another model's
    rows: list[LowerBound] = []
    for batch in sorted({b for _, b in summary.planned}):
        paths = [path for path, b in summary.planned if b == batch]
        selection = PlanSelection.of(models=paths, batches=[batch], granularities=config.granularities)
        rows += analyze_stored(store, systems, selection=selection)
    return rows
