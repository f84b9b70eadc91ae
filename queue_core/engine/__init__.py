"""The engine's operations, one module per family of scripts (each module's docstring names the
Lua scripts it backs), all on one base (base.py). queue_core.queue composes them into DelayQueue
and AsyncDelayQueue; import those from ``queue_core``.

| module       | operations                                                        | scripts (lua/)             |
|--------------|-------------------------------------------------------------------|----------------------------|
| publish.py   | publish, publish_many                                             | publish                    |
| consume.py   | claim, ack, nack, reject, release, extend, heartbeat              | claim ack nack release extend |
| operate.py   | deliver_now reschedule kill cancel delete remove replay replay_dead replay_edited purge find_by_key | same names, remove for cancel/delete |
| configure.py | configure_topic, configure_group, groups, delete_group, pause, resume | layout, delete_group   |
| find.py      | find, search                                                      | find, search               |
| read.py      | get, states, acked, peek, page, group_page, error_groups, dead_count, lease_counts, topics | get, peek       |
| schedules.py | upsert_schedule, schedule(s), pause/resume/delete_schedule, tick_states | (plain commands)     |
| ticks.py     | tick_schedule(s), run_schedule_now, backfill_schedule             | schedule_tick (wraps publish) |
| stats.py     | counts, stats, workers, live_workers, throughput, lateness, summaries, snapshot | counts       |
| dispatch.py  | dispatch_state, held_reason (what the limits hold back; enforced in claim) | (reads; includes/dispatch.lua) |
| index.py     | set_indexes, indexes, build_index, sweep_index (indexed fields)         | index, sweep_index (includes/index.lua) |
| memory.py    | memory, budget_use (a topic's Redis memory and time to full; how full its budget is: includes/budget.lua) | (MEMORY USAGE, INFO) |
| forecast.py  | due_forecast, spread (the due load ahead, and flattening it)       | due_forecast; reschedule  |
| batch.py     | batch, open_batch, seal_batch, discard_batch, batch_status, batch_of, batch_members, batch_next_due, forward_batch_callbacks | batch (includes/batch.lua) |
"""

from .base import EngineBase
from .batch import Batch, Batches, BatchGroupStatus, BatchStatus
from .configure import Configure
from .consume import ClaimResult, Consume, Failure
from .dispatch import Dispatch, DispatchState
from .find import Find, FindResult, Location, SearchPage, Sighting
from .forecast import DueForecast, Forecast
from .index import Index, IndexBuild, Indexing
from .memory import BudgetUse, Memory, TopicMemory
from .operate import Operate
from .publish import Publish
from .read import ErrorGroup, Page, Read
from .schedules import Schedule, ScheduleNotFound, Schedules, Tick
from .stats import LiveWorkers, Stats, WorkerInfo
from .ticks import Backfill, TickResult, Ticks
from .undo import Holding, Undo, UndoResult


class QueueEngine(Ticks, Schedules, Batches, Publish, Consume, Forecast, Memory, Operate, Configure, Find, Read, Stats,
                  Dispatch, Indexing, Undo):
    """Every operation of the engine; DelayQueue and AsyncDelayQueue differ only in ``_drive``."""


__all__ = ["Backfill", "Batch", "Batches", "BatchGroupStatus", "BatchStatus", "ClaimResult", "Configure", "Consume", "Dispatch", "DispatchState", "EngineBase", "ErrorGroup",
           "Failure", "Operate", "Page", "Publish", "QueueEngine", "Read", "Schedule", "ScheduleNotFound", "Schedules",
           "Stats", "Tick", "Ticks", "TickResult", "LiveWorkers", "WorkerInfo", "Find", "FindResult", "Location",
           "SearchPage", "Sighting", "Index", "IndexBuild", "DueForecast", "Forecast", "Memory", "TopicMemory", "BudgetUse",
           "Holding", "Undo", "UndoResult"]
