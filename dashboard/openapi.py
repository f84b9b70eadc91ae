"""The JSON API's OpenAPI 3.1 description, served at ``api/schema/`` and written here only: the
API tests validate every request and answer against it (tests/dashboard/openapi_check.py) and a
fuzz run sends it generated requests (tests/dashboard/test_openapi_fuzz.py).

To add a field to an answer, add it to its schema in SCHEMAS (answers are closed: an undescribed
field fails the API tests, which is what keeps this true). To add an endpoint, add its path to
PATHS with the route of urls.py written as a template (``<str:name>`` is ``{name}``); a test
checks that the two lists of routes are the same. The limits come from the code that enforces them."""

from django.urls import reverse

from .api import MAX_SCHEDULES_PAGE, SCHEDULES_PAGE
from .api_input import MAX_BATCH, MAX_DEPTH, MAX_KEY_CHARS, MAX_REPLAY, PUBLISH_FIELDS
from .services.contracts import DEDUP_MODES, LATENESS_CAUSES, MAX_PRIORITY, PUBLISH_OUTCOMES, MessageState
from .services.publishing import MAX_AHEAD
from .views_workers import DEFAULT_SORT, SORTS

STATES = [s.value for s in MessageState]


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def closed(required: dict, optional: dict | None = None, description: str = "") -> dict:
    """An object with exactly these fields (``required`` always there, ``optional`` sometimes)."""
    schema = {"type": "object", "properties": {**required, **(optional or {})}, "required": list(required),
              "additionalProperties": False}
    return {**schema, "description": description} if description else schema


STR, INT, BOOL, NUM = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}, {"type": "number"}
TIME = {"type": "string", "format": "date-time"}


def nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


LATENESS_CAUSE = nullable({"enum": list(LATENESS_CAUSES), "description": "Unacked only: why the delivery in progress "
                           "was claimed more than 10 ms after its due time (null: on time)."})
LATE_BEHIND = nullable({**STR, "description": "For lateness_cause key_held: the id of the message that held the "
                                              "ordering key."})


def array(items: dict, **limits) -> dict:
    return {"type": "array", "items": items, **limits}


COUNTS = {"type": "object", "properties": {s: INT for s in STATES}, "required": STATES, "additionalProperties": False,
          "description": "Messages per state."}
SECONDS = {"type": "number", "maximum": MAX_AHEAD.total_seconds()}
# What a publish did (queue_core PublishResult.outcome): a held key answers with its holder's id.
OUTCOME = {"enum": list(PUBLISH_OUTCOMES)}

SCHEMAS = {
    "Error": closed({"error": STR}, description="Every refusal: what was wrong, in words."),
    "ReplayUnconfirmed": closed({"error": STR, "unconfirmed": array(STR)},
                                description="503 of a replay the replicas did not confirm: the ids did move on the "
                                            "master; sending the same request again is safe."),
    "TopicList": closed({"topics": array(closed({
        "name": STR, "managed": BOOL, "paused": BOOL, "partitions": INT, "counts": COUNTS,
        "groups": array(closed({"name": STR, "paused": BOOL, "counts": COUNTS,
                                "workers": {"type": "integer", "minimum": 0}}))}))}),
    "WorkerList": closed({
        "now": TIME, "live_within_s": NUM,
        "workers": array(closed({
            "id": STR, "group": STR, "topics": array(STR), "host": nullable(STR), "pid": nullable(INT),
            "runtime": nullable(STR), "concurrency": nullable(INT), "in_flight": nullable(INT),
            "started": nullable(TIME), "last_beat": TIME, "last_beat_age_s": {"type": "number", "minimum": 0},
            "version": nullable(STR)})),
        "groups_without_workers": array(closed({"topic": STR, "group": STR}))}),
    "ScheduleList": closed({"schedules": array(closed({
        "name": STR, "topic": STR, "state": {"enum": ["active", "paused", "ended"]},
        "words": STR, "expression": STR, "tz": STR, "overlap": STR, "catchup_window": nullable(NUM),
        "jitter": NUM, "max_runs": nullable(INT), "next": array(TIME), "runs": INT, "missed": INT, "skipped": INT,
        "paused": nullable(closed({"at": TIME, "actor": STR, "note": STR})),
        "ticks": array(closed({"tick": TIME, "outcome": STR, "message_id": nullable(STR),
                               "message_state": nullable(STR), "late_ms": INT, "count": INT}))})),
        "next": nullable(STR)},
        description="A page of schedules by name, never a schedule's payload. next: pass as ?after= for the next "
                    "page (null: the last one)."),
    "FindResult": closed({
        "q": STR, "complete": BOOL, "gaps": array(STR),
        "found": array(closed({"topic": STR, "group": STR, "partition": INT, "id": STR,
                               "state": {"enum": STATES}, "url": {"type": "string", "format": "uri"}})),
        "seen": array(closed({"topic": STR, "group": nullable(STR), "partition": INT, "id": STR, "event": STR,
                              "at": nullable(TIME), "actor": STR}))},
        description="found: where the message is now; seen: where the event stream last saw one no group holds."),
    "MessagePage": closed({
        "group": STR, "next": nullable(STR),
        "messages": array(closed({
            "id": STR, "group": STR, "partition": INT, "state": nullable({"enum": STATES}), "attempts": INT,
            "due_at": nullable(TIME), "key": nullable(STR), "priority": nullable(INT), "fairness_key": nullable(STR),
            "lateness_cause": LATENESS_CAUSE, "late_behind": LATE_BEHIND,
            "dead_at": nullable(TIME), "corrupt": nullable({**STR, "description": "Why its data could not be read."}),
            "last_error": nullable(closed({"type": STR, "message": STR, "fingerprint": STR})),
            "payload_preview": STR, "payload_size": INT, "payload_truncated": BOOL, "redacted": BOOL}))},
        {"scan": closed({"scanned": INT, "total": INT, "matched": INT, "done": BOOL})},
        description="Payload previews, redacted by the topic's rules. next: pass as ?after= for the next page "
                    "(null: the last one). scan: with ?q=, how far the bounded scan got."),
    "Message": closed({"id": STR, "group": STR, "payload": STR, "size": INT, "redacted": BOOL, "headers": STR,
                       "state": nullable({"enum": STATES}), "journal": nullable(ref("Journal")),
                       "waiting_for": nullable({**STR, "description": "Published with after=: the id whose ack in "
                                                                       "this group releases it."}),
                       "lateness_cause": LATENESS_CAUSE, "late_behind": LATE_BEHIND},
                      description="The whole payload, redacted by the topic's rules; headers as indented JSON text."),
    "Batch": closed({
        "id": STR, "topic": STR, "partition": INT, "created_at": TIME, "sealed_at": nullable(TIME),
        "group": nullable({**STR, "description": "The one group whose callbacks fire; null: each group's."}),
        "callbacks": {"type": "object", "additionalProperties": STR,
                      "description": "Callback kind (complete, success, dead) -> the topic it publishes to."},
        "groups": array(closed({
            "group": STR, "total": INT, "acked": INT, "dead": INT, "removed": INT, "pending": INT,
            "eta_s": nullable(NUM),
            "fired": {"type": "object", "additionalProperties": TIME, "description": "Kind -> when it fired."},
            "unsent": array(STR),
            "failed": {"type": "object", "additionalProperties": STR,
                       "description": "Kind -> why its topic refused it for good (never published)."}}))},
        description="A batch (q.batch()): removed = cancelled, deleted, purged or dropped on expiry; eta_s: "
                    "seconds until every member ended at the rate they have so far (null: none ended yet); "
                    "unsent: callbacks fired but not yet published to their topic."),
    "Journal": closed({"progress": nullable({"type": "number", "minimum": 0, "maximum": 1}), "note": STR,
                       "progress_at": nullable(TIME), "progress_attempt": INT,
                       "lines": array(closed({"at": nullable(TIME), "attempt": INT, "text": STR}))},
                      description="What the message's handlers reported (progress, log lines), redacted; null: "
                                  "nothing."),
    "ReplayRequest": closed({"ids": array({"type": "string", "minLength": 1}, minItems=1, maxItems=MAX_REPLAY)}),
    "Replayed": closed({"group": STR, "replayed": INT, "skipped": INT},
                       description="skipped: ids that were not dead (already replayed, or unknown)."),
    "PublishMessage": {
        **closed({}, {
            "payload": {"description": f"Any JSON value (a string is published as its UTF-8 text, anything else "
                                       f"as the JSON text sent); at most {MAX_DEPTH} levels deep."},
            "payload_base64": {"type": "string", "contentEncoding": "base64"},
            "delay": {**SECONDS, "minimum": 0}, "at": {**TIME, "description": "With an offset; not with delay."},
            "key": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS,
                    "description": "Dedup key."},
            "order_key": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS},
            "headers": {"type": "object", "additionalProperties": STR},
            "ttl": {**SECONDS, "minimum": 0.001}, "partition": {"type": "integer", "minimum": 0, "maximum": 1_000_000},
            "max_attempts": {"type": "integer", "minimum": 1, "maximum": 1_000_000},
            "fairness_key": {"type": "string", "minLength": 1, "maxLength": 256,
                             "description": "1 to 256 bytes of UTF-8, no NUL."},
            "priority": {"type": "integer", "minimum": 0, "maximum": MAX_PRIORITY,
                         "description": "Higher is claimed first among due messages."},
            "dedup": {"enum": list(DEDUP_MODES), "description": "With key: unique_for (held `window` s after the message "
                      "is done), throttle (held `window` s from this publish) or debounce (the key's unstarted "
                      "message takes this payload and due time)."},
            "window": {**SECONDS, "minimum": 0.001, "description": "With dedup unique_for or throttle."},
            "after": {"type": "string", "minLength": 1, "maxLength": 64,
                      "description": "A message id: published when `group` acks it (delay counts from the ack)."},
            "group": {"type": "string", "minLength": 1, "maxLength": 64,
                      "description": "With after: the group whose ack releases it, and the only one that receives "
                                     "it (default: default)."}}),
        "oneOf": [{"required": ["payload"]}, {"required": ["payload_base64"]}],
        "not": {"required": ["delay", "at"]}},
    "PublishRequest": {"oneOf": [ref("PublishMessage"), closed({"messages": array(
        {"type": "object", "description": "A PublishMessage; one that is not is refused alone (its result's error)."},
        minItems=1, maxItems=MAX_BATCH)})]},
    "Budget": closed({"budget": {"type": "string", "enum": ["max_messages", "max_bytes"]}, "limit": INT,
                      "partition": INT, "share": INT, "used": INT, "adding": INT},
                     description="The memory budget that refused a message (TopicFull): the topic's limit, the "
                                 "partition's share and use, and what the message would have added."),
    "PublishResult": closed({"index": INT}, {"id": STR, "outcome": OUTCOME, "error": STR, "unconfirmed_id": STR,
                                             "budget": ref("Budget")}),
    "Published": closed(
        {"topic": STR, "published": INT, "accepted": INT, "failed": INT, "results": array(ref("PublishResult"))},
        {"index": INT, "id": STR, "outcome": OUTCOME, "error": STR, "unconfirmed_id": STR, "budget": ref("Budget")},
        description="published: new messages written; accepted: every message answered with an id (a "
                    "duplicate, throttled or debounced one too); failed: refused. A result per message, in "
                    "order (an id and its outcome, or an error; unconfirmed_id: "
                    "published on the master, not confirmed by the replicas). A single message's result is merged in at the top too."),
}
assert set(PUBLISH_FIELDS) == set(SCHEMAS["PublishMessage"]["properties"]), "api_input.PUBLISH_FIELDS changed"


def error(description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": ref("Error")}}}


def answer(description: str, schema: dict) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


COMMON = {"401": error("Not logged in, or the API token is missing, unknown, revoked or expired."),
          "403": error("A permission is missing, or the API token's scope does not cover this (read-only, "
                       "publish-only, some topics); for a POST with the session, a failed CSRF check."),
          "503": error("Redis is unreachable.")}


READING = [{"session": []}, {"token": []}]
WRITING = [{"session": [], "csrf": []}, {"token": []}]     # a POST with the session needs the CSRF token


def param(name: str, where: str, schema: dict, description: str, required: bool | None = None) -> dict:
    return {"name": name, "in": where, "required": where == "path" if required is None else required,
            "schema": schema, "description": description}


TOPIC = param("name", "path", STR, "The topic.")
GROUP = param("group", "path", STR, "A consumer group of the topic (without it: the default group).")
STATE = param("state", "path", {"enum": STATES}, "The state tab.")
MSG_ID = param("msg_id", "path", STR, "The message id.")


def read(summary: str, ok: dict, *parameters, errors: dict | None = None, perm: str = "view_queue") -> dict:
    return {"get": {"summary": summary, "description": f"Needs the {perm} permission.",
                    "security": READING, "parameters": list(parameters),
                    "responses": {"200": ok, **COMMON, **(errors or {})}}}


def messages_list(*where) -> dict:
    return read("A page of one group's messages in one state, with payload previews",
                answer("A page.", ref("MessagePage")), *where,
                param("q", "query", STR, "A query (payload.customer.id:42, key:order-*, attempts>=3 ...), an id or a "
                                         "dedup key; empty: every message.", False),
                param("after", "query", STR, "The previous page's next.", False),
                errors={"400": error("A malformed query or cursor."),
                        "404": error("No such topic, group or state.")})


def message(*where) -> dict:
    return read("One message's whole payload, redacted", answer("The message.", ref("Message")), *where,
                errors={"404": error("No such topic or group, or no such message in the group (acked, cancelled, "
                                     "deleted or evicted).")})


def replay(*where) -> dict:
    return {"post": {
        "summary": "Replay dead messages", "description": "Needs replay_message; a token with full access. Audited.",
        "security": WRITING, "parameters": list(where),
        "requestBody": {"required": True, "content": {"application/json": {"schema": ref("ReplayRequest")}}},
        "responses": {"200": answer("Replayed.", ref("Replayed")), **COMMON,
                      "400": error("A malformed body, or a bad topic name."),
                      "404": error("No such topic or group."),
                      "413": error("The body is larger than DELAYQ_API_MAX_BODY_BYTES."),
                      "503": {"description": "Redis is unreachable, or the replicas did not confirm the replay.",
                              "content": {"application/json": {"schema": {"anyOf": [ref("Error"),
                                                                                    ref("ReplayUnconfirmed")]}}}}}}}


PATHS = {
    "/api/schema/": read("This description", answer("OpenAPI 3.1.", {"type": "object"})),
    "/api/topics/": read("Every topic, its groups and their counts", answer("The topics.", ref("TopicList"))),
    "/api/workers/": read("Live workers and the groups without one", answer("The workers.", ref("WorkerList")),
                          param("sort", "query", {"enum": [*SORTS, ""]}, f"Empty or none: {DEFAULT_SORT}.", False),
                          errors={"400": error("An unknown sort.")}),
    "/api/schedules/": read("The schedules, a page at a time by name, without payloads",
                            answer("A page of schedules.", ref("ScheduleList")),
                            param("q", "query", STR, "Keeps the schedules whose name or topic contains it.", False),
                            param("limit", "query", {"type": "string", "pattern": r"^[0-9]*$"},
                                  f"Schedules per page, 1 to {MAX_SCHEDULES_PAGE}; empty or none: {SCHEDULES_PAGE}.",
                                  False),
                            param("after", "query", STR, "The previous page's next.", False),
                            errors={"400": error("A limit out of range, or an after that is no cursor.")}),
    "/api/find/": read("Find a message anywhere by id, id prefix or dedup key", answer("Where.", ref("FindResult")),
                       param("q", "query", {"type": "string", "minLength": 1}, "An id, id prefix or dedup key.",
                             True),
                       errors={"400": error("No q, or one the engine refuses.")}),
    "/api/topics/{name}/replay/": replay(TOPIC),
    "/api/topics/{name}/messages/": {"post": {
        "summary": "Publish one message or a batch to every consumer group of the topic",
        "description": "Needs publish_message; a token with full or publish access. Not to a Celery bridge topic "
                       "(celery.*). Audited.",
        "security": WRITING, "parameters": [TOPIC],
        "requestBody": {"required": True, "content": {"application/json": {"schema": ref("PublishRequest")}}},
        "responses": {"201": answer("All published.", ref("Published")),
                      "207": answer("Some published, some not.", ref("Published")), **COMMON,
                      "400": answer("A malformed body, or none published (also when the budget refused some "
                                    "and something else the others: each result says why).",
                                    {"anyOf": [ref("Error"), ref("Published")]}),
                      "403": error("As for every endpoint, or a Celery bridge topic."),
                      "404": error("No such topic."),
                      "413": error("The body is larger than DELAYQ_API_MAX_BODY_BYTES."),
                      "507": answer("None published, every message refused by the topic's memory budget "
                                    "(max_messages or max_bytes, each partition its share); each refused message's "
                                    "error has a budget "
                                    "object (budget, limit, partition, share, used, adding).", ref("Published"))}}},
    "/api/topics/{name}/messages/{msg_id}/": message(TOPIC, MSG_ID),
    "/api/topics/{name}/batch/{batch_id}/": read("A batch: its counts and callbacks per group",
                                                 answer("The batch.", ref("Batch")), TOPIC,
                                                 param("batch_id", "path", STR, "The batch id (q.batch().id)."),
                                                 errors={"404": error("No such topic or batch.")}),
    "/api/topics/{name}/{state}/": messages_list(TOPIC, STATE),
    "/api/topics/{name}/{group}/replay/": replay(TOPIC, GROUP),
    "/api/topics/{name}/{group}/messages/{msg_id}/": message(TOPIC, GROUP, MSG_ID),
    "/api/topics/{name}/{group}/{state}/": messages_list(TOPIC, GROUP, STATE),
}

DESCRIPTION = """The delayq dashboard's JSON API. Every answer is JSON, refusals too (`{"error": "..."}`).

Two ways in: the session (log in; a POST then needs the csrftoken cookie's value in the X-CSRFToken
header) or a personal API token from the API tokens page (`Authorization: Bearer dq_...`, no CSRF),
which acts as its owner and may be narrowed to read-only, publish-only or some topics.

A method an address does not list is refused with 405 and an Allow header naming the ones it
does; any other address under api/ is a 404 with the same error body."""


def document(server: str = "") -> dict:
    """The description; ``server`` is where the dashboard is mounted (the paths are below it)."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "delayq dashboard API", "version": "1", "description": DESCRIPTION},
        "servers": [{"url": server or "/"}],
        "security": READING,
        "paths": PATHS,
        "components": {
            "schemas": SCHEMAS,
            "responses": {"MethodNotAllowed": {**error("This address does not take this method."),
                                               "headers": {"Allow": {"schema": STR}}},
                          "NoSuchAddress": error("No API at this address.")},
            "securitySchemes": {
                "session": {"type": "apiKey", "in": "cookie", "name": "sessionid",
                            "description": "The dashboard's login session (the cookie is the host's SESSION_COOKIE_NAME)."},
                "csrf": {"type": "apiKey", "in": "header", "name": "X-CSRFToken",
                         "description": "With the session, on every POST: the csrftoken cookie's value."},
                "token": {"type": "http", "scheme": "bearer",
                          "description": "A personal API token (dq_...), made on the dashboard's API tokens page."}}},
    }


def server_url(request) -> str:
    """Where this site's dashboard is, as the request reached it (without the final slash)."""
    return request.build_absolute_uri(reverse("delayq:overview")).rstrip("/")
