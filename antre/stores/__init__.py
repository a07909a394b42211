"""What Antre keeps beside the queue: the SQL models and their Alembic migrations (``sql``,
``migrations/``), the idempotency store (``idempotency``), the transactional outbox
(``outbox``), lock fencing tokens committed with a handler's writes (``fencing``), dashboard
users (``users``), the audit log (``audit``) and the failed-login window (``logins``, in Redis).

May import: ``antre.engine``, ``antre.errors``, ``antre.clock``, SQLAlchemy and Alembic.
"""
