"""Audit entries written before the change they record: the outcome 'started' (the entry of a
change under way, or one whose outcome could not be written after it ran).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

CHECK = "ck_antre_audit_outcome"


def upgrade() -> None:
    with op.batch_alter_table("antre_audit") as batch:  # SQLite: the table is copied
        batch.drop_constraint(CHECK, type_="check")
        batch.create_check_constraint(
            CHECK, "outcome IN ('started', 'ok', 'refused', 'failed')")


def downgrade() -> None:
    op.execute("UPDATE antre_audit SET outcome = 'failed' WHERE outcome = 'started'")
    with op.batch_alter_table("antre_audit") as batch:
        batch.drop_constraint(CHECK, type_="check")
        batch.create_check_constraint(CHECK, "outcome IN ('ok', 'refused', 'failed')")
