-- Version 3: a client's report on a solved task's answer (once), and an
-- index of each tenant's dead letters, so one client's are found without
-- reading the others'.
ALTER TABLE tasks ADD COLUMN report text NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN reported_at timestamptz;
CREATE INDEX tasks_dead_by_tenant ON tasks (tenant, seq) WHERE status = 'failed';
