-- One eviction cycle per interval across every replica, coordinated by time.
--
-- The advisory lock only kept cycles from overlapping: N replicas each ran their own cycle
-- every interval. Now a replica runs a scheduled cycle only if it claims the current slot
-- (floor(epoch / interval), on the database's clock, which every replica shares) with one
-- conditional UPDATE: exactly one claim per slot succeeds, whichever replica asks first.
CREATE TABLE eviction_schedule (
    id        smallint PRIMARY KEY CHECK (id = 1),
    last_slot bigint   NOT NULL DEFAULT 0
);
INSERT INTO eviction_schedule (id, last_slot) VALUES (1, 0);
