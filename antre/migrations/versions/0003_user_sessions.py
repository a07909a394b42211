"""Users: a session generation, so that dashboard sessions can be revoked.

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


def downgrade() -> None:
    with op.batch_alter_table("antre_users") as batch:
        batch.drop_column("session_gen")
