-- Version 1: the tasks, the store's owner.
CREATE TABLE tasks (
	seq                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id                   text    NOT NULL UNIQUE,
	status               text    NOT NULL CHECK (status IN ('queued', 'inflight', 'solved', 'failed')),
	priority             integer NOT NULL,
	tenant               text    NOT NULL,
	method               text    NOT NULL,
	params               text    NOT NULL,
	deadline             timestamptz,
	max_attempts         integer NOT NULL,
	proxy                text    NOT NULL,
	proxy_type           text    NOT NULL,
	pingback             text    NOT NULL,
	fingerprint          text    NOT NULL,
	captcha_id           text    NOT NULL DEFAULT '',
	attempts             integer NOT NULL DEFAULT 0,
	not_before           timestamptz,
	last_error           text    NOT NULL DEFAULT '',
	last_error_code      text    NOT NULL DEFAULT '',
	accepted_at          timestamptz NOT NULL,
	submitted_at         timestamptz,
	result_method        text,
	result_kind          text,
	result_token         text,
	result_answer        text,
	result_error         text,
	result_error_code    text,
	result_attempts      integer,
	result_solve_seconds double precision,
	result_expires_at    timestamptz,
	result_accepted_at   timestamptz,
	result_submitted_at  timestamptz,
	finished_at          timestamptz,
	result_provider      text,
	result_price         double precision,
	result_abandoned     text[]
);
CREATE INDEX tasks_unfinished ON tasks (seq) WHERE status IN ('queued', 'inflight');
CREATE INDEX tasks_final ON tasks (status, seq) WHERE status IN ('solved', 'failed');
CREATE INDEX tasks_finished_at ON tasks (finished_at) WHERE finished_at IS NOT NULL;
CREATE TABLE store_owner (
	one   boolean PRIMARY KEY DEFAULT true CHECK (one),
	owner text NOT NULL
);
