-- Version 6: front_id_key holds the secret key (16 bytes) with which every
-- replica permutes the numbers of front_ids' blocks into the ids it hands
-- out (IDKey), so a client's ids tell nothing of the other clients' tasks.
-- The first IDKey writes it; it is never changed.
CREATE TABLE front_id_key (
	one boolean PRIMARY KEY DEFAULT true CHECK (one),
	key bytea   NOT NULL CHECK (length(key) = 16)
);
