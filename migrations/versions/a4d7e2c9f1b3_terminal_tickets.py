"""web terminals' one-time tickets; capacity holds (open terminals, file transfers); the
files a run left in /workspace/output

Revision ID: a4d7e2c9f1b3
Revises: f2a8c6e4d1b9
Create Date: 2026-12-04 17:10:00

A ticket is stored as its sha256 and used once (issue 26); open terminals and file
transfers are counted across processes from their capacity_holds rows.
"""
from alembic import op
import sqlalchemy as sa

revision = 'a4d7e2c9f1b3'
down_revision = 'f2a8c6e4d1b9'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        'terminal_tickets',
        sa.Column('digest', sa.String(length=64), nullable=False),
        sa.Column('tenant_id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('session_id', sa.String(length=36), nullable=False),
        sa.Column('login_digest', sa.String(length=64), nullable=True),
        sa.Column('session_version', sa.Integer(), nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('used_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['session_id'], ['sandbox_sessions.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('digest'),
    )
    op.create_index('ix_terminal_tickets_session_id', 'terminal_tickets', ['session_id'])
    op.create_index('ix_terminal_tickets_expires_at', 'terminal_tickets', ['expires_at'])
    op.create_table(
        'capacity_holds',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('kind', sa.String(length=24), nullable=False),
        sa.Column('tenant_id', sa.Integer(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('session_id', sa.String(length=36), nullable=False),
        sa.Column('opened_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('seen_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['session_id'], ['sandbox_sessions.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_capacity_holds_tenant_id', 'capacity_holds', ['tenant_id'])
    op.create_index('ix_capacity_holds_session_id', 'capacity_holds', ['session_id'])
    with op.batch_alter_table('exec_runs') as batch:
        batch.add_column(sa.Column('new_output_files', sa.Integer(), nullable=True))


def downgrade():
    with op.batch_alter_table('exec_runs') as batch:
        batch.drop_column('new_output_files')
    op.drop_table('capacity_holds')
    op.drop_index('ix_terminal_tickets_expires_at', table_name='terminal_tickets')
    op.drop_index('ix_terminal_tickets_session_id', table_name='terminal_tickets')
    op.drop_table('terminal_tickets')
