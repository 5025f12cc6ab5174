-- Version 2: what the processes of one front share beside the tasks.
-- front_ids hands out blocks of 1000 numeric task ids (IDBlock); it starts
-- at the clock in microseconds, above the ids a server handed out before.
CREATE SEQUENCE front_ids INCREMENT BY 1000;
SELECT setval('front_ids', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
-- active_queue names the process that holds the active-queue lock
-- (Activate), for the message that refuses a second one.
CREATE TABLE active_queue (
	one   boolean PRIMARY KEY DEFAULT true CHECK (one),
	host  text        NOT NULL,
	pid   integer     NOT NULL,
	since timestamptz NOT NULL
);
