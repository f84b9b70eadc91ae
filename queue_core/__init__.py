"""delayq's engine: a Redis delay queue with exact timing, leases with fencing tokens, retry
policies and a dead-letter queue. Pure Python + Lua; no Django."""


from .config import GroupConfig, TopicConfig
from .engine.batch import Batch, BatchGroupStatus, BatchStatus
from .engine.dedup import PublishResult
from .engine.find import FindResult, SearchPage
from .engine.forecast import DueForecast
from .engine.memory import BudgetUse, TopicMemory
from .engine.read import ErrorGroup, Page
from .engine.schedules import Schedule, ScheduleNotFound, Tick
from .engine.ticks import Backfill, TickResult
from .engine.undo import Holding, UndoResult
from .errors import (
    Cancelled,
    DelayTooLong,
    DuplicateMessage,
    HoldExpired,
    InvalidArgument,
    InvalidTopic,
    LeaseLost,
    MessageNotFound,
    NotReplicated,
    PayloadTooLarge,
    QueueError,
    StateConflict,
    TopicFull,
    TopicNotEmpty,
    WorkerCrashed,
)
from .journal import Journal, LogLine
from .layout import TopicLayout
from .message import Delivery, ErrorInfo, HistoryEntry, Message, Reject
from .query import Query, QueryError
from .queue import AsyncDelayQueue, ClaimResult, DelayQueue, Failure
from .retry import RetryPolicy
from .states import MessageState
from .worker import AsyncWorker, Worker

__all__ = [
    "AsyncDelayQueue", "AsyncWorker", "Backfill", "BudgetUse", "Batch", "BatchGroupStatus", "BatchStatus", "Cancelled", "ClaimResult", "DelayQueue", "DelayTooLong", "Delivery",
    "DueForecast", "DuplicateMessage", "ErrorGroup", "ErrorInfo", "Failure", "GroupConfig", "HistoryEntry", "HoldExpired", "Holding", "InvalidArgument",
    "InvalidTopic", "Journal", "LeaseLost", "LogLine", "Message", "MessageNotFound", "MessageState", "NotReplicated", "Page",
    "PayloadTooLarge", "PublishResult", "QueueError", "Reject", "RetryPolicy", "Schedule", "ScheduleNotFound", "StateConflict",
    "Tick", "TickResult", "FindResult", "Query", "QueryError", "SearchPage",
    "TopicConfig", "TopicFull", "TopicLayout", "TopicMemory", "TopicNotEmpty", "UndoResult", "Worker", "WorkerCrashed",
]
