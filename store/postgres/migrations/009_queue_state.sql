-- Version 9: small named values of the queue kept across restarts and
-- takeovers (captchaq.StateStore), such as its providers' refusals of
-- types.
CREATE TABLE queue_state (
	name  text  PRIMARY KEY,
	value bytea NOT NULL
);
