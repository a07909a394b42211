"""Antre's initial tables: idempotency records, outbox, users, audit log.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Plain types on purpose: migrations must not change when the models' Python helpers do.
TS = sa.DateTime(timezone=True)
BIGID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # SQLite autoincrement needs INTEGER


def upgrade() -> None:
    op.create_table(
        "antre_idempotency",
        sa.Column("key", sa.String(500), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("job_type", sa.String(200), nullable=False),
        sa.Column("job_id", sa.String(100), nullable=False),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("lock_fence", sa.BigInteger(), nullable=True),
        sa.Column("owner", sa.String(200), nullable=True),
        sa.Column("lease_deadline_ms", sa.BigInteger(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_antre_idempotency"),
        sa.CheckConstraint(
            "status IN ('processing', 'completed', 'failed')", name="ck_antre_idempotency_status"
        ),
    )
    op.create_index("ix_antre_idempotency_expires_at", "antre_idempotency", ["expires_at"])
    op.create_index("ix_antre_idempotency_status", "antre_idempotency", ["status"])
    op.create_index("ix_antre_idempotency_job_id", "antre_idempotency", ["job_id"])

    op.create_table(
        "antre_outbox",
        sa.Column("id", BIGID, autoincrement=True, nullable=False),
        sa.Column("queue", sa.String(200), nullable=False),
        sa.Column("job_id", sa.String(100), nullable=False),
        sa.Column("envelope", sa.Text(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("sent_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_antre_outbox"),
    )
    op.create_index("uq_antre_outbox_job_id", "antre_outbox", ["job_id"], unique=True)
    op.create_index("ix_antre_outbox_sent_at", "antre_outbox", ["sent_at"])

    op.create_table(
        "antre_users",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("password_hash", sa.String(255), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("disabled", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.PrimaryKeyConstraint("id", name="pk_antre_users"),
        sa.CheckConstraint("role IN ('viewer', 'operator', 'admin')", name="ck_antre_users_role"),
    )
    op.create_index("uq_antre_users_name", "antre_users", ["name"], unique=True)

    op.create_table(
        "antre_audit",
        sa.Column("id", BIGID, autoincrement=True, nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("user", sa.String(200), nullable=False),
        sa.Column("role", sa.String(16), nullable=True),
        sa.Column("action", sa.String(100), nullable=False),
        sa.Column("target", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("remote_addr", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_antre_audit"),
        sa.CheckConstraint("outcome IN ('ok', 'refused', 'failed')", name="ck_antre_audit_outcome"),
    )
    op.create_index("ix_antre_audit_at", "antre_audit", ["at"])
    op.create_index("ix_antre_audit_action", "antre_audit", ["action"])
    op.create_index("ix_antre_audit_user", "antre_audit", ["user"])


def downgrade() -> None:
    op.drop_table("antre_audit")
    op.drop_table("antre_users")
    op.drop_table("antre_outbox")
    op.drop_table("antre_idempotency")
