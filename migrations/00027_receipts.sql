-- +goose Up
-- The receipt of an attempt of a call that has an effect (idempotent or
-- side_effect): the SHA-256 (hex) of the arguments as the tool was given
-- them (compacted, keys in the order given), written with the attempt's
-- start, and of the exact bytes of the result the tool returned, written
-- with its end, both computed at execution. They are kept because the
-- arguments and the result are stored as jsonb, which reorders and
-- respaces them: a hash of what a read gives back would not be the hash of
-- what the tool saw. The call's idempotency key names the receipt. NULL:
-- not recorded (a read_only tool, an attempt begun before this migration,
-- an attempt that returned no result).
ALTER TABLE tool_attempts ADD COLUMN arguments_sha256 text, ADD COLUMN result_sha256 text;

-- +goose Down
ALTER TABLE tool_attempts DROP COLUMN arguments_sha256, DROP COLUMN result_sha256;
