"""Revocable dashboard sessions: a session generation per user (every older session ends when
it moves on), and the sessions ended one by one at logout.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("antre_users", sa.Column("session_gen", sa.Integer(), nullable=False,
                                           server_default="0"))
    op.create_table(
        "antre_revoked_sessions",
        sa.Column("sid", sa.String(64), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("sid", name="pk_antre_revoked_sessions"),
    )
    op.create_index("ix_antre_revoked_sessions_expires_at", "antre_revoked_sessions",
                    ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_antre_revoked_sessions_expires_at", "antre_revoked_sessions")
    op.drop_table("antre_revoked_sessions")
    with op.batch_alter_table("antre_users") as batch:
        batch.drop_column("session_gen")
