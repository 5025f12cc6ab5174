-- Version 4: room a replica of a front took in a client's max_inflight
-- (TakeSlots) between its check and the task's record, so replicas that
-- take a client's last slot at one moment do not both get it; and an
-- index of each tenant's unfinished tasks, which that check counts.
CREATE TABLE front_slots (
	id     text        PRIMARY KEY,
	tenant text        NOT NULL,
	taken  timestamptz NOT NULL,
	until  timestamptz NOT NULL
);
CREATE INDEX front_slots_tenant ON front_slots (tenant);
CREATE INDEX tasks_unfinished_by_tenant ON tasks (tenant) WHERE status IN ('queued', 'inflight');
