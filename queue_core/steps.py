"""One engine, two kinds of I/O: the DelayQueue's operations are written once, as generators that
yield what they need from Redis and receive the reply; a driver runs them.

A step is a callable taking the client: ``cmd("hget", key, field)`` or ``pipeline(fill)``. With
a blocking client (``redis.Redis``) it returns the reply, with an asyncio one
(``redis.asyncio.Redis``) an awaitable of it; ``run`` and ``arun`` are the two drivers.
An error a step raises is thrown into the generator at the ``yield``, so an operation's own
``try``/``except`` works as it would around a direct call.

Why not two copies of the engine, or the sync one in threads: every rule of delayq (routing,
batching, codes and their errors, replica waits) lives in the operation, so the blocking and
the asyncio client cannot drift apart, and the asyncio one does no thread hopping per call.
"""

import functools
import inspect
from collections.abc import Callable, Generator
from typing import Any

Step = Callable[[Any], Any]
Steps = Generator[Step, Any, Any]


def cmd(name: str, *args, **kwargs) -> Step:
    """A redis-py command method by name (the same names and reply parsing in both clients)."""
    return lambda client: getattr(client, name)(*args, **kwargs)


def pipeline(fill: Callable[[Any], Any], *, transaction: bool = False, raise_on_error: bool = True) -> Step:
    """``fill(pipe)`` queues commands (queueing is synchronous in both clients); the step's
    reply is the list of replies."""
    def step(client):
        pipe = client.pipeline(transaction=transaction)
        fill(pipe)
        return pipe.execute(raise_on_error=raise_on_error)
    return step


def script(picker, keys: list, args: list) -> Step:
    """A registered script (scripts._KeyPicker) called through the driver's client: EVALSHA,
    loaded and retried on NOSCRIPT by redis-py. The client is the queue's own, or what a worker
    thread keeps for itself (queue_core.own_connection)."""
    return lambda client: picker(keys=keys, args=args, client=client)


def run(steps: Steps, client) -> Any:
    """Run an operation with a blocking client."""
    try:
        step = next(steps)
        while True:
            try:
                reply = step(client)
            except Exception as exc:  # noqa: BLE001 - handed to the operation, which may handle it
                step = steps.throw(exc)
            else:
                step = steps.send(reply)
    except StopIteration as done:
        return done.value


async def arun(steps: Steps, client) -> Any:
    """Run an operation with an asyncio client."""
    try:
        step = next(steps)
        while True:
            try:
                reply = step(client)
                if inspect.isawaitable(reply):
                    reply = await reply
            except Exception as exc:  # noqa: BLE001 - handed to the operation, which may handle it
                step = steps.throw(exc)
            else:
                step = steps.send(reply)
    except StopIteration as done:
        return done.value


def operation(steps_fn: Callable[..., Steps], public: str | None = None) -> Callable:
    """The public method (named ``public``, else the generator's name without its underscore) of
    a generator method ``_name``: ``DelayQueue`` returns the result, ``AsyncDelayQueue`` a
    coroutine of it (their ``_drive``). The generator is looked up by name on the instance, so a
    subclass that overrides ``_name`` changes both."""
    name = steps_fn.__name__

    @functools.wraps(steps_fn)
    def method(self, *args, **kwargs):
        return self._drive(getattr(self, name)(*args, **kwargs))
    method.__name__ = public or name.removeprefix("_")
    method.__qualname__ = steps_fn.__qualname__.rsplit(".", 1)[0] + "." + method.__name__
    return method
