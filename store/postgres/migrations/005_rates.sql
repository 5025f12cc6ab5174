-- Version 5: each client's rate across the replicas of a front (Admit): a
-- token bucket a row, its tokens as of at, filled at the client's rate up
-- to its burst, taken from in the statement that admits a task.
CREATE TABLE front_rates (
	tenant text             PRIMARY KEY,
	tokens double precision NOT NULL,
	at     timestamptz      NOT NULL
);
