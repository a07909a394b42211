"""Lock fences: the highest fencing token that committed SQL effects per business lock.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "antre_lock_fences",
        sa.Column("lock_key", sa.String(200), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("lock_key", name="pk_antre_lock_fences"),
    )


def downgrade() -> None:
    op.drop_table("antre_lock_fences")
