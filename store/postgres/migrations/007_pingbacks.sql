-- Version 7: the pingbacks owed (captchaq.PingbackLedger): since when
-- (NULL: none; set by the finish of a task with a pingback), and until
-- when a sender holds one.
ALTER TABLE tasks ADD COLUMN pingback_owed timestamptz;
ALTER TABLE tasks ADD COLUMN pingback_lease timestamptz;
CREATE INDEX tasks_pingback_owed ON tasks (pingback_owed) WHERE pingback_owed IS NOT NULL;
