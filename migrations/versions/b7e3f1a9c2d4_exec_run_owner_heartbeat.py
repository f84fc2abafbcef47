"""exec runs record the process executing them and its heartbeat

Revision ID: b7e3f1a9c2d4
Revises: a4d7e2c9f1b3
Create Date: 2026-12-04 17:45:00

A run that outlives its request names its process and is refreshed by it; when the
heartbeat stops, the reaper marks the run `lost` (issue 28 item 4). The status column
is a plain string, so the new value needs no schema change.
"""
from alembic import op
import sqlalchemy as sa

revision = 'b7e3f1a9c2d4'
down_revision = 'a4d7e2c9f1b3'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('exec_runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('owner', sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index('ix_exec_runs_status_heartbeat', ['status', 'heartbeat_at'],
                              unique=False)


def downgrade():
    op.execute("UPDATE exec_runs SET status = 'failed' WHERE status = 'lost'")
    with op.batch_alter_table('exec_runs', schema=None) as batch_op:
        batch_op.drop_index('ix_exec_runs_status_heartbeat')
        batch_op.drop_column('heartbeat_at')
        batch_op.drop_column('owner')
