-- Version 8: reservoirs' tokens (captchaq.ReservoirStore), each a solved
-- result, taken in the order they expire (TakeToken locks the row it
-- takes, skipping those another take holds); which reservoir's token
-- answered a task (Result.Reservoir).
ALTER TABLE tasks ADD COLUMN result_reservoir text;
CREATE TABLE reservoir_tokens (
	reservoir     text             NOT NULL,
	id            text             NOT NULL,
	method        text             NOT NULL,
	kind          text             NOT NULL,
	token         text             NOT NULL,
	answer        text,
	attempts      integer          NOT NULL,
	captcha_id    text             NOT NULL,
	solve_seconds double precision NOT NULL,
	expires_at    timestamptz      NOT NULL,
	provider      text             NOT NULL,
	price         double precision NOT NULL,
	abandoned     text[],
	accepted_at   timestamptz,
	submitted_at  timestamptz,
	finished_at   timestamptz,
	PRIMARY KEY (reservoir, id)
);
CREATE INDEX reservoir_tokens_expiry ON reservoir_tokens (reservoir, expires_at, id);
